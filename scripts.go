package redislock

import "github.com/redis/go-redis/v9"

// The Lua scripts behind Release, Refresh and TTL. Each compares the whole
// token stored at the lock key with the caller's before acting, so a holder
// whose lease expired can never touch the key of the holder that came after
// it; Redis runs a script atomically, so nothing can happen between the
// comparison and the action.
//
// They are go-redis Scripts: run with EVALSHA, and loaded again with EVAL by
// go-redis when Redis answers NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover), so they never need to be loaded by hand.
var (
	// releaseScript deletes the lock if it is still ours.
	//
	//	KEYS[1] lock key
	//	ARGV[1] token
	//	returns 1 when the key held the token and was deleted,
	//	        0 when the key is absent or holds another token (nothing changed).
	releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	return 1
end
return 0`)

	// refreshScript extends the lease of the lock if it is still ours.
	//
	//	KEYS[1] lock key
	//	ARGV[1] token
	//	ARGV[2] new ttl in milliseconds (>= 1)
	//	returns 1 when the key held the token and its ttl was set to ARGV[2],
	//	        0 when the key is absent or holds another token (nothing changed).
	refreshScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	return 1
end
return 0`)

	// pttlScript reports the remaining lease of the lock if it is still ours.
	//
	//	KEYS[1] lock key
	//	ARGV[1] token
	//	returns the key's remaining ttl in milliseconds (>= 0) when it holds the token,
	//	        -2 when the key is absent or holds another token.
	pttlScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PTTL", KEYS[1])
end
return -2`)
)
