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

// The scripts behind fencing (see fence.go).
var (
	// acquireFencedScript acquires the lock and issues a fencing token in one
	// atomic step, so that fences are handed out in the order the lock is.
	//
	//	KEYS[1] lock key
	//	KEYS[2] fence counter of the lock key's hash slot (never expires)
	//	ARGV[1] token
	//	ARGV[2] ttl in milliseconds (>= 1)
	//	returns the new fence (>= 1) when the key is now held with the token:
	//	        it was free and is set to ARGV[1] with ttl ARGV[2], or it held
	//	        ARGV[1] already (an earlier attempt whose reply was lost; its
	//	        fence was never learned, so a new one is issued);
	//	        0 when another token holds the key (nothing changed).
	acquireFencedScript = redis.NewScript(`
local held = redis.call("GET", KEYS[1])
if held == false then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
elseif held ~= ARGV[1] then
	return 0
end
return redis.call("INCR", KEYS[2])`)

	// fencedSetScript writes a value guarded by a fencing token.
	//
	//	KEYS[1] resource key, a hash with the fields "value" and "fence"
	//	ARGV[1] value
	//	ARGV[2] the writer's fence (>= 1)
	//	returns {1, fence} when ARGV[2] >= the resource's fence: value and
	//	        fence are set to ARGV[1] and ARGV[2];
	//	        {0, fence} when ARGV[2] is lower than the resource's fence
	//	        (nothing changed). fence is the resource's fence before the call
	//	        (0 for a new resource).
	fencedSetScript = redis.NewScript(`
local seen = tonumber(redis.call("HGET", KEYS[1], "fence") or "0")
if tonumber(ARGV[2]) < seen then
	return {0, seen}
end
redis.call("HSET", KEYS[1], "value", ARGV[1], "fence", ARGV[2])
return {1, seen}`)
)
