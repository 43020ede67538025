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
	// releaseScript deletes the lock if it is still ours, and takes a waiting
	// token out of the queue; either way, when the key is free it announces
	// the turn of the first process in the key's queue (see acquireScript).
	//
	//	KEYS[1] lock key
	//	KEYS[2] queue: list of the tokens of waiting processes, oldest first
	//	KEYS[3] places: hash token -> until when (ms, Redis clock) it keeps its place
	//	ARGV[1] token
	//	ARGV[2] wake channel of the key
	//	returns 1 when the key held the token and was deleted,
	//	        0 when the key is absent or holds another token (the key is
	//	        untouched; if the token was waiting in the queue, it leaves it).
	//	publishes the queue's first token on ARGV[2] when the key is free.
	releaseScript = redis.NewScript(`
local released = 0
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	released = 1
elseif redis.call("HDEL", KEYS[3], ARGV[1]) == 1 then
	redis.call("LREM", KEYS[2], 1, ARGV[1])
	if redis.call("EXISTS", KEYS[1]) == 1 then
		return 0
	end
else
	return 0
end
local head = redis.call("LINDEX", KEYS[2], 0)
if head then
	redis.call("PUBLISH", ARGV[2], head)
end
return released`)

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

// acquireScript is the acquire attempt of fenced locks and of waiting
// processes. It sets the lock, issues a fencing token when asked, and keeps
// the queue that makes waiting fair: a process that waits puts its token at
// the end of the key's queue, and while the queue is not empty only its first
// token may take the free key. The release of the key announces the turn of
// that first token (see releaseScript), so one release causes one attempt.
// A waiting token keeps its place for ARGV[4] ms after each of its attempts;
// a waiter that stopped attempting (its process died) is dropped from the
// head of the queue once that time has passed.
//
//	KEYS[1] lock key
//	KEYS[2] fence counter (never expires; used only when ARGV[3] is "1")
//	KEYS[3] queue: list of the tokens of waiting processes, oldest first
//	KEYS[4] places: hash token -> until when (ms, Redis clock) it keeps its place
//	ARGV[1] token
//	ARGV[2] ttl in milliseconds (>= 1)
//	ARGV[3] "1" to issue a fence, "0" not to
//	ARGV[4] how long to keep a place in the queue, in ms; 0: a single attempt,
//	        which neither joins nor respects the queue (like a plain SET NX)
//	returns {1, fence} when the key now holds the token with ttl ARGV[2]:
//	        it was free and it was this token's turn, or it held the token
//	        already (an earlier attempt whose reply was lost; its fence was
//	        never learned, so a new one is issued). fence is the incremented
//	        counter, or 0 without ARGV[3].
//	        {0, pttl} when not: pttl is the holder's remaining lease in ms, or
//	        -2 when the key is free but another token is first in the queue.
var acquireScript = redis.NewScript(`
local token, lease = ARGV[1], tonumber(ARGV[4])
local function take()
	if ARGV[3] == "1" then
		return {1, redis.call("INCR", KEYS[2])}
	end
	return {1, 0}
end
local holder = redis.call("GET", KEYS[1])
if holder == token then
	if redis.call("HDEL", KEYS[4], token) == 1 then
		redis.call("LREM", KEYS[3], 1, token)
	end
	return take()
end
if lease == 0 then
	if holder then
		return {0, redis.call("PTTL", KEYS[1])}
	end
	redis.call("SET", KEYS[1], token, "PX", ARGV[2])
	return take()
end
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local head = redis.call("LINDEX", KEYS[3], 0)
while head and head ~= token and tonumber(redis.call("HGET", KEYS[4], head) or 0) < now do
	redis.call("LPOP", KEYS[3])
	redis.call("HDEL", KEYS[4], head)
	head = redis.call("LINDEX", KEYS[3], 0)
end
if not holder and (not head or head == token) then
	redis.call("SET", KEYS[1], token, "PX", ARGV[2])
	if head then
		redis.call("LPOP", KEYS[3])
		redis.call("HDEL", KEYS[4], token)
	end
	return take()
end
if redis.call("HSET", KEYS[4], token, now + lease) == 1 then
	redis.call("RPUSH", KEYS[3], token)
end
redis.call("PEXPIRE", KEYS[3], 2 * lease)
redis.call("PEXPIRE", KEYS[4], 2 * lease)
if holder then
	return {0, redis.call("PTTL", KEYS[1])}
end
return {0, -2}`)

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
var fencedSetScript = redis.NewScript(`
local seen = tonumber(redis.call("HGET", KEYS[1], "fence") or "0")
if tonumber(ARGV[2]) < seen then
	return {0, seen}
end
redis.call("HSET", KEYS[1], "value", ARGV[1], "fence", ARGV[2])
return {1, seen}`)
