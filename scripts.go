package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of this package, each next to the Go helper that builds its
// KEYS and ARGV. A script compares the whole token stored at the lock key with
// the caller's before acting, so a holder whose lease expired can never touch
// the key of the holder that came after it; Redis runs a script atomically, so
// nothing can happen between the comparison and the action.
//
// They are go-redis Scripts: run with EVALSHA, and loaded again with EVAL by
// go-redis when Redis answers NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover), so they never need to be loaded by hand.
//
// The data of one lock key K, all in K's Redis Cluster slot (see sideKey):
//
//	K       the lock: the holder's token, with the lease as its expiry
//	fence   counter of the fences issued for K (no expiry; see WithFencing)
//	queue   list of the tokens of the places in line, first in line first
//	places  hash token -> "deadline ttl fenced locker": until when (ms,
//	        Redis clock) the place is kept, the lease (ms) and fencing ("1"
//	        or "0") to hand the key over with, and the id of the Locker to
//	        announce the hand-off to
//
// Invariant: while the queue is not empty, the key is not free. Whoever finds
// the key free with places in line (a release, or an attempt after a lease
// expired) hands it to the first place that has not lapsed, in the same
// script. So nothing can overtake a place in line, and a waiter never sends
// anything to take a key it was handed.

// scriptKeys returns the KEYS of every script that acts on the lock key:
// the key, its fence counter, its queue and its places.
func scriptKeys(key string) []string {
	return []string{key, sideKey(key, fenceKind), sideKey(key, queueKind), sideKey(key, placesKind)}
}

// nowLua sets now to Redis's clock in milliseconds. Scripts may call TIME
// since Redis 5 (they are replicated by their effects).
const nowLua = `
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
`

// fenceLua issues the next fence of KEYS[2]. It returns nil and the error
// when the counter cannot be incremented (it holds something else than an
// integer, or is at 2^63-1); then it has changed nothing. Every script issues
// the fence before it sets the key, so that a failed fence leaves no lock.
const fenceLua = `
local function issueFence()
	local n = redis.pcall("INCR", KEYS[2])
	if type(n) == "table" then
		return nil, n.err
	end
	return n
end
`

// placeLua keeps a place in line for token: it records the place (see the
// data above) and puts token at the end of the queue if it was not in line.
const placeLua = `
local function place(token, keep, ttl, fenced, locker)
	local value = (now + keep) .. " " .. ttl .. " " .. fenced .. " " .. locker
	if redis.call("HSET", KEYS[4], token, value) == 1 then
		redis.call("RPUSH", KEYS[3], token)
	end
	redis.call("PEXPIRE", KEYS[3], 2 * keep)
	redis.call("PEXPIRE", KEYS[4], 2 * keep)
end
`

// handoffLua gives the free key to the first place in line that has not
// lapsed: it sets the key to that token with the place's lease, issues its
// fence if the place asked for one, and announces it on the wake channel of
// the place's Locker, "<fence> <waiting> <token> <key>" (waiting: the
// places left in line), unless that Locker is ARGV[2]
// (the caller's, which learns it from the reply). Lapsed places (their
// waiter stopped renewing them) are dropped on the way. A place whose fence
// cannot be issued is dropped too, and told so with fence -1.
//
// It returns the token the key was handed to and its fence, or false when
// no place was left.
const handoffLua = `
local function handoff(quiet)
	while true do
		local token = redis.call("LPOP", KEYS[3])
		if not token then
			return false, 0, 0
		end
		local value = redis.call("HGET", KEYS[4], token)
		redis.call("HDEL", KEYS[4], token)
		if value then
			local deadline, lease, fenced, locker = string.match(value, "^(%d+) (%d+) (%d) (.*)$")
			if tonumber(deadline) >= now then
				local fence = 0
				if fenced == "1" then
					fence = issueFence() or -1
				end
				if fence >= 0 then
					redis.call("SET", KEYS[1], token, "PX", lease)
				end
				if fence < 0 or not (quiet and locker == ARGV[2]) then
					redis.call("PUBLISH", "` + wakePrefix + `" .. locker, fence .. " " .. lease .. " " .. token .. " " .. KEYS[1])
				end
				if fence >= 0 then
					return token, fence, tonumber(lease)
				end
			end
		end
	end
end
`

// acquireScript makes one attempt to take the lock for a token.
//
//	KEYS    scriptKeys(key)
//	ARGV[1] token
//	ARGV[2] the id of the caller's Locker
//	ARGV[3] lease (ttl) in ms, >= 1
//	ARGV[4] "1" to issue a fence, "0" not to
//	ARGV[5] how long to keep a place in line, in ms; "0": a single attempt
//	        that takes no place
//	ARGV[6] "1" to take a place (a token's first attempt), "0" to renew
//	        the place the token has: a place is taken once per token, so
//	        that a place confirmed by a reply was taken before any hand-off
//	        to its token (a hand-off removes the place for good)
//	returns {1, fence} when the key holds the token now, with the lease
//	        ARGV[3] from now: it was free with nobody in line, it was handed
//	        to the token by an earlier script (the waiter had not heard yet),
//	        or an earlier attempt whose reply was lost had set it. fence is a
//	        new fence, or 0 without ARGV[4].
//	        {0, pttl} when another token holds the key: pttl is its
//	        remaining lease in ms (-1: no expiry). With ARGV[5] > 0 the token
//	        now has a place in line, kept ARGV[5] ms from now.
//	        {-1, pttl} when the token was to renew its place, and has none:
//	        the place lapsed, or the key was handed to it and that lease ran
//	        out. The token must not be used again.
//	        An error reply when the fence could not be issued: the key is then
//	        not held by the token.
var acquireScript = redis.NewScript(nowLua + fenceLua + placeLua + handoffLua + `
local token, ttl, fenced, keep = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5])
local holder = redis.call("GET", KEYS[1])
local fence = 0
if not holder and redis.call("EXISTS", KEYS[3]) == 1 then
	holder, fence = handoff(false)
	if holder ~= token then
		fence = 0
	end
end
if not holder or holder == token then
	if fenced == "1" and fence == 0 then
		local err
		fence, err = issueFence()
		if not fence then
			if holder then
				redis.call("DEL", KEYS[1])
				handoff(false)
			end
			return redis.error_reply(err)
		end
	end
	if holder then
		redis.call("PEXPIRE", KEYS[1], ttl)
	else
		redis.call("SET", KEYS[1], token, "PX", ttl)
	end
	if redis.call("HDEL", KEYS[4], token) == 1 then
		redis.call("LREM", KEYS[3], 1, token)
	end
	return {1, fence}
end
if keep > 0 then
	if ARGV[6] == "0" and redis.call("HEXISTS", KEYS[4], token) == 0 then
		return {-1, redis.call("PTTL", KEYS[1])}
	end
	place(token, keep, ttl, fenced, ARGV[2])
end
return {0, redis.call("PTTL", KEYS[1])}`)

// attemptArgs are the arguments of one acquireScript run.
type attemptArgs struct {
	key, token, locker string
	ttl                time.Duration
	fenced             bool
	place              time.Duration // how long to keep a place; 0: a single attempt
	renew              bool          // renew the token's place, do not take one
}

// attemptResult is the outcome of an acquireScript run.
type attemptResult struct {
	ours    bool
	fence   int64         // when ours
	pttl    time.Duration // when not ours: the holder's remaining lease, < 0 if none
	noPlace bool          // a renewal found no place: the token is spent
}

// runAttempt runs acquireScript.
func runAttempt(ctx context.Context, c redis.Scripter, a attemptArgs) (attemptResult, error) {
	res, err := acquireScript.Run(ctx, c, scriptKeys(a.key),
		a.token, a.locker, a.ttl.Milliseconds(), flag(a.fenced), a.place.Milliseconds(), flag(!a.renew)).Int64Slice()
	if err != nil {
		return attemptResult{}, err
	}
	if len(res) != 2 {
		return attemptResult{}, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	if res[0] == 1 {
		return attemptResult{ours: true, fence: res[1]}, nil
	}
	return attemptResult{pttl: time.Duration(res[1]) * time.Millisecond, noPlace: res[0] == -1}, nil
}

// releaseScript releases the lock or leaves the line, and hands the key to
// the first place in line when it is free.
//
//	KEYS    scriptKeys(key), then the release mark of ARGV[1]: a key that
//	        says, for a while, that the lock of ARGV[1] was released
//	ARGV[1] token to release, or to take out of line
//	ARGV[2] the id of the caller's Locker
//	ARGV[3] another token to take out of line (the place of a line of the
//	        caller's Locker that nobody waits in any more), or ""
//	ARGV[4] how long to keep the release mark, in ms; "0": no mark
//	returns {released, to, fence, lease}:
//	        released is 1 when the key held ARGV[1] and was deleted, or when
//	        the mark says that an earlier run of this release did so (its
//	        reply was lost, and go-redis sent it again), else 0 (the key was
//	        untouched, and ARGV[1] is no longer in line);
//	        to is the token the key was handed to, or "" when it was not
//	        handed over (it is held by another, or nobody is in line); fence
//	        is to's fence (0 when it asked for none); lease is the lease it
//	        got, in ms.
var releaseScript = redis.NewScript(nowLua + fenceLua + handoffLua + `
local released = 0
local holder = redis.call("GET", KEYS[1])
if holder == ARGV[1] then
	redis.call("DEL", KEYS[1])
	released = 1
	holder = false
	if ARGV[4] ~= "0" then
		redis.call("SET", KEYS[5], 1, "PX", ARGV[4])
	end
elseif ARGV[4] ~= "0" and redis.call("EXISTS", KEYS[5]) == 1 then
	released = 1
elseif redis.call("HDEL", KEYS[4], ARGV[1]) == 1 then
	redis.call("LREM", KEYS[3], 1, ARGV[1])
end
if ARGV[3] ~= "" and redis.call("HDEL", KEYS[4], ARGV[3]) == 1 then
	redis.call("LREM", KEYS[3], 1, ARGV[3])
end
local to, fence, lease = "", 0, 0
if not holder then
	to, fence, lease = handoff(true)
end
return {released, to or "", fence, lease}`)

// releaseArgs are the arguments of one releaseScript run.
type releaseArgs struct {
	key, token, locker string
	leave              string        // a place to take out of line too, or ""
	mark               time.Duration // how long to keep the release mark; 0: none
}

// releaseResult is the outcome of a releaseScript run.
type releaseResult struct {
	released bool
	handoff
	to string // the token the key was handed to, or ""
}

// handoff is a hand-off of the key to a token (a line's): fence is its
// fence, 0 for none, -1 when it could not be issued (the place was dropped);
// lease is the lease it got.
type handoff struct {
	fence int64
	lease time.Duration
}

// runRelease runs releaseScript.
func runRelease(ctx context.Context, c redis.Scripter, a releaseArgs) (releaseResult, error) {
	keys := append(scriptKeys(a.key), sideKey(a.key, releasedKind+":"+a.token))
	res, err := releaseScript.Run(ctx, c, keys, a.token, a.locker, a.leave, a.mark.Milliseconds()).Slice()
	if err != nil {
		return releaseResult{}, err
	}
	if len(res) != 4 {
		return releaseResult{}, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	released, _ := res[0].(int64)
	to, _ := res[1].(string)
	fence, _ := res[2].(int64)
	lease, _ := res[3].(int64)
	return releaseResult{released: released == 1, to: to,
		handoff: handoff{fence: fence, lease: time.Duration(lease) * time.Millisecond}}, nil
}

// refreshScript extends the lease of the lock if it is still ours, and
// issues it a fence when asked.
//
//	KEYS[1] lock key
//	KEYS[2] fence counter
//	ARGV[1] token
//	ARGV[2] new ttl in milliseconds (>= 1)
//	ARGV[3] "1" to issue a new fence, "0" not to
//	returns {1, fence} when the key held the token and its ttl was set to
//	        ARGV[2] (fence: the new fence, or 0),
//	        {0, 0} when the key is absent or holds another token (nothing
//	        changed). An error reply when the fence could not be issued
//	        (nothing changed).
var refreshScript = redis.NewScript(fenceLua + `
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return {0, 0}
end
local fence = 0
if ARGV[3] == "1" then
	local err
	fence, err = issueFence()
	if not fence then
		return redis.error_reply(err)
	end
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return {1, fence}`)

// refreshKeys and refreshArgv build refreshScript's KEYS and ARGV.
func refreshKeys(key string) []string { return []string{key, sideKey(key, fenceKind)} }

func refreshArgv(token string, ttl time.Duration, fenced bool) []any {
	return []any{token, ttl.Milliseconds(), flag(fenced)}
}

// runRefresh runs refreshScript: held reports whether the key held token.
func runRefresh(ctx context.Context, c redis.Scripter, key, token string, ttl time.Duration, fenced bool) (held bool, fence int64, err error) {
	res, err := refreshScript.Run(ctx, c, refreshKeys(key), refreshArgv(token, ttl, fenced)...).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	return res[0] == 1, res[1], nil
}

// pttlScript reports the remaining lease of the lock if it is still ours.
//
//	KEYS[1] lock key
//	ARGV[1] token
//	returns the key's remaining ttl in milliseconds (>= 0) when it holds the token,
//	        -2 when the key is absent or holds another token.
var pttlScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PTTL", KEYS[1])
end
return -2`)

// runPTTL runs pttlScript.
func runPTTL(ctx context.Context, c redis.Scripter, key, token string) (time.Duration, error) {
	ms, err := pttlScript.Run(ctx, c, []string{key}, token).Int64()
	return time.Duration(ms) * time.Millisecond, err
}

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

// runFencedSet runs fencedSetScript: ok reports whether the value was
// written; seen is the resource's fence before the call.
func runFencedSet(ctx context.Context, c redis.Scripter, key, value string, fence int64) (ok bool, seen int64, err error) {
	res, err := fencedSetScript.Run(ctx, c, []string{key}, value, fence).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, errors.New("redislock: unexpected reply to the fenced write")
	}
	return res[0] == 1, res[1], nil
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
