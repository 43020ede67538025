package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
//	K        an exclusive lock (a plain lock, or the writer of a read-write
//	         lock): the holder's token, with the lease as its expiry; or, for
//	         a semaphore, a sorted set: each permit's token, scored with the
//	         end of its lease (ms, Redis clock)
//	fence    counter of the fences issued for K (no expiry; see WithFencing)
//	queue    list of the tokens of the places in line, first in line first
//	places   hash token -> "deadline ttl fenced mode locker": until when (ms,
//	         Redis clock) the place is kept, the lease (ms), fencing ("1" or
//	         "0") and mode ("x" exclusive, "s" shared, or a semaphore's
//	         number of permits) to hand the key over with, and the id of the
//	         Locker to announce the hand-off to
//	readers  sorted set of the shared holders (readers), each scored with the
//	         end of its lease
//	limit    a semaphore's number of permits
//	gens     hash token -> the highest generation of the lease commands
//	         Redis ran for that holder (see leaseClock); only holders whose
//	         lease length changed have one. It expires with the longest lease
//	         it was set with.
//	holders  hash token -> the holder's description (WithHolder), for
//	         Inspect; it expires with the holders' last lease, and a
//	         holder's entry goes when its hold ends
//
// A sorted set of holders expires with its last lease (and limit with it),
// and its lapsed holders are removed by every script that looks at it, so
// a holder that died frees its share at the end of its own lease.
//
// Invariant: while the queue is not empty, its first place cannot take the
// key (it does not fit). Whoever finds that it fits (a release, or an
// attempt after a lease expired) hands the key to it in the same script,
// and to the places after it while they fit too: all readers up to the
// next writer, permits while there are some. So nothing can overtake a place
// in line, and a waiter never sends anything to take a key handed to it.

// scriptKeys returns the KEYS of every script that acts on a lock key.
func scriptKeys(key string) []string {
	return []string{key, sideKey(key, fenceKind), sideKey(key, queueKind), sideKey(key, placesKind),
		sideKey(key, readersKind), sideKey(key, limitKind), sideKey(key, gensKind), sideKey(key, holdersKind)}
}

// fenceLua defines issueFence, which issues the next fence of the counter
// KEYS[2], and fenceProblem, which says why it cannot.
//
// Fences stop at 2^53-1 (maxFenceLua): Lua's numbers are doubles, exact up to
// 2^53, and a fence rounded on its way out of a script would repeat. A
// counter at 2^53-1 or beyond, or holding something else than a
// non-negative integer, issues no fence: issueFence returns nil and the
// error, having changed nothing.
const fenceLua = `
local function fenceProblem()
	local f = redis.pcall("GET", KEYS[2])
	if type(f) == "table" then
		return f.err
	elseif not f then
		return nil
	elseif not string.match(f, "^%d+$") then
		return "ERR redislock: the fence counter holds something else than a non-negative integer"
	elseif tonumber(f) >= ` + maxFenceLua + ` then
		return "ERR redislock: the fence counter is at its maximum (2^53-1, the largest integer Lua holds exactly)"
	end
	return nil
end

local function issueFence()
	local problem = fenceProblem()
	if problem then
		return nil, problem
	end
	local n = redis.pcall("INCR", KEYS[2])
	if type(n) == "table" then
		return nil, n.err
	end
	return n
end

-- the fence a script was asked for: a new one when flag is "1", else 0
local function askedFence(flag)
	if flag ~= "1" then
		return 0
	end
	return issueFence()
end
`

// maxFenceLua is the largest fence a script issues, 2^53-1, as Lua reads it.
const maxFenceLua = "9007199254740991"

// lineLua is the prelude of the scripts that act on a lock key: its KEYS
// (see scriptKeys), Redis's clock, and the helpers of the data model.
//
// Scripts may call TIME since Redis 5 (they are replicated by their
// effects). issueFence returns nil and the error when the counter cannot be
// incremented (it holds something else than a non-negative integer, or is at 2^53-1),
// having changed nothing: every script issues the fence before it sets the
// key, so that a failed fence leaves no lock.
const lineLua = fenceLua + `
local K, FENCE, QUEUE, PLACES, READERS, LIMIT, GENS, HOLDERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)

-- the sorted set of the holders of a shared or permit mode
local function holderSet(mode)
	if mode == "s" then
		return READERS
	end
	return K
end

-- makes the holders z expire with the last lease among them (limit and
-- their descriptions too)
local function setExpiry(z)
	local last = redis.call("ZRANGE", z, -1, -1, "WITHSCORES")
	if last[2] then
		redis.call("PEXPIREAT", z, last[2])
		redis.call("PEXPIREAT", HOLDERS, last[2])
		if z == K then
			redis.call("PEXPIREAT", LIMIT, last[2])
		end
	else
		redis.call("DEL", HOLDERS)
		if z == K then
			redis.call("DEL", LIMIT)
		end
	end
end

-- removes the holders of z whose lease ended. A lease that ends at e (ms,
-- Redis clock, cut to the millisecond) lasts while now <= e: a holder set
-- at E for ttl (e = floor(E) + ttl) keeps its share until at least E + ttl,
-- as a key with PX ttl does, and the sorted set expires with it (Redis
-- expires a key at PEXPIREAT e once its clock is past e).
local function prune(z)
	local lapsed = redis.call("ZRANGEBYSCORE", z, "-inf", "(" .. now)
	if #lapsed > 0 then
		redis.call("ZREMRANGEBYSCORE", z, "-inf", "(" .. now)
		redis.call("HDEL", HOLDERS, unpack(lapsed))
		redis.call("HDEL", GENS, unpack(lapsed))
		setExpiry(z)
	end
end

-- whether a holder of mode could take the key now
local function fits(mode)
	if mode == "x" then
		if redis.call("EXISTS", K) == 1 then
			return false
		end
		prune(READERS)
		return redis.call("EXISTS", READERS) == 0
	elseif mode == "s" then
		return redis.call("EXISTS", K) == 0
	end
	prune(K)
	return redis.call("ZCARD", K) < tonumber(mode)
end

-- what the key is, as its holders say, or else its first live place in line:
-- "lock" (exclusive or shared), a semaphore's number of permits, or nil
-- when nobody holds it or waits for it (a semaphore's waiters name its
-- permits while its holders' leases, and the limit with them, are over)
local function kindOf()
	local limit = redis.call("GET", LIMIT)
	if limit then
		return limit
	end
	local t = redis.call("TYPE", K).ok
	if t == "zset" then
		return nil -- a semaphore's holders without their limit: none to compare
	end
	prune(READERS)
	if t ~= "none" or redis.call("EXISTS", READERS) == 1 then
		return "lock"
	end
	for _, token in ipairs(redis.call("LRANGE", QUEUE, 0, -1)) do
		local value = redis.call("HGET", PLACES, token)
		local deadline, mode
		if value then
			deadline, mode = string.match(value, "^(%d+) %d+ %d (%w+) ")
		end
		if value and tonumber(deadline) >= now then -- a live place: its waiter renews it
			if mode == "x" or mode == "s" then
				return "lock"
			end
			return mode
		end
	end
	return nil
end

-- whether token holds the key in mode (a WRONGTYPE error when the key
-- holds data of another kind: an acquisition cannot wait that out)
local function holds(token, mode)
	if mode == "x" then
		return redis.call("GET", K) == token
	end
	local lease = redis.call("ZSCORE", holderSet(mode), token)
	return lease and tonumber(lease) >= now
end

-- makes token hold the key in mode for ttl ms from now; desc (nil: keep
-- the one it has) describes the holder
local function take(token, mode, ttl, desc)
	if mode == "x" then
		redis.call("SET", K, token, "PX", ttl)
		if desc then
			redis.call("DEL", HOLDERS) -- the entries of holders whose lease ran out
			if desc ~= "" then
				redis.call("HSET", HOLDERS, token, desc)
				redis.call("PEXPIRE", HOLDERS, ttl)
			end
		end
		return
	end
	local z = holderSet(mode)
	redis.call("ZADD", z, now + ttl, token)
	if desc and desc ~= "" then
		redis.call("HSET", HOLDERS, token, desc)
	end
	if mode ~= "s" then
		redis.call("SET", LIMIT, mode)
	end
	setExpiry(z)
end

-- sets the lease of token, which holds the key in mode, to ttl ms from now,
-- unless it ends later already: a late copy of an attempt (go-redis sent it
-- again, and the first copy ran after) never shortens a lease that a
-- Refresh or a hand-off set since (see leaseClock)
local function extend(token, mode, ttl)
	if mode == "x" then
		if redis.call("PTTL", K) < tonumber(ttl) then
			redis.call("PEXPIRE", K, ttl)
			if redis.call("HEXISTS", HOLDERS, token) == 1 and redis.call("PTTL", HOLDERS) < tonumber(ttl) then
				redis.call("PEXPIRE", HOLDERS, ttl)
			end
		end
		return
	end
	local z = holderSet(mode)
	redis.call("ZADD", z, "GT", now + ttl, token)
	setExpiry(z)
end

-- ends token's hold in mode; returns whether it held the key (false, not
-- an error, when the key holds data of another kind)
local function drop(token, mode)
	local held = false
	if mode == "x" then
		if redis.pcall("GET", K) == token then
			redis.call("DEL", K)
			held = true
		end
	elseif redis.call("TYPE", holderSet(mode)).ok == "zset" then
		local z = holderSet(mode)
		prune(z)
		if redis.call("ZREM", z, token) == 1 then
			setExpiry(z)
			held = true
		end
	end
	if held then -- side keys another client broke do not undo the release
		redis.pcall("HDEL", GENS, token)
		redis.pcall("HDEL", HOLDERS, token)
	end
	return held
end

-- how long until a holder that keeps mode from fitting may end (ms), or a
-- negative number when none does (only the line is in the way)
local function blockedFor(mode)
	local z = K
	if mode == "s" then
		return redis.call("PTTL", K)
	elseif mode == "x" then
		if redis.call("EXISTS", K) == 1 then
			return redis.call("PTTL", K)
		end
		z = READERS
	end
	local first = redis.call("ZRANGE", z, 0, 0, "WITHSCORES")
	if first[2] then
		return math.max(tonumber(first[2]) - now, 0)
	end
	return -1
end

-- (fenceProblem, see fenceLua, tells a waiter that wants a fence what is
-- wrong with the counter before it waits, not when the key is handed to it)

-- keeps a place in line for token
local function place(token, keep, ttl, fenced, mode, locker, desc)
	local value = (now + keep) .. " " .. ttl .. " " .. fenced .. " " .. mode .. " " .. locker .. " " .. desc
	if redis.call("HSET", PLACES, token, value) == 1 then
		redis.call("RPUSH", QUEUE, token)
	end
	redis.call("PEXPIRE", QUEUE, 2 * keep)
	redis.call("PEXPIRE", PLACES, 2 * keep)
end

-- takes token's place out of line, if it has one
local function leave(token)
	if redis.call("HDEL", PLACES, token) == 1 then
		redis.call("LREM", QUEUE, 1, token)
	end
end

-- Hands the key to the first place in line while it fits: one exclusive
-- holder, or shared holders up to the next exclusive one, or permits while
-- some are free. Lapsed places (their waiter stopped renewing them) are
-- dropped on the way, and so is a place whose fence cannot be issued (told
-- with fence -1). Each hand-off is announced on the wake channel of the
-- place's Locker, "<fence> <lease> <token> <key>", except, when quiet, to the
-- caller's own Locker (ARGV[2]): those are returned instead, as a flat list
-- token, fence, lease. The second result is the number of hand-offs.
local function handoff(quiet)
	local mine, n = {}, 0
	while true do
		local token = redis.call("LINDEX", QUEUE, 0)
		if not token then
			return mine, n
		end
		local value = redis.call("HGET", PLACES, token)
		local deadline, ttl, fenced, mode, locker, desc
		if value then
			deadline, ttl, fenced, mode, locker, desc = string.match(value, "^(%d+) (%d+) (%d) (%w+) (%x+) (.*)$")
		end
		local live = value and tonumber(deadline) >= now
		if live and not fits(mode) then
			return mine, n
		end
		redis.call("LPOP", QUEUE)
		redis.call("HDEL", PLACES, token)
		if live then
			local fence = 0
			if fenced == "1" then
				fence = issueFence() or -1
			end
			if fence >= 0 then
				take(token, mode, ttl, desc)
				n = n + 1
			end
			if quiet and fence >= 0 and locker == ARGV[2] then
				mine[#mine + 1] = token
				mine[#mine + 1] = fence
				mine[#mine + 1] = tonumber(ttl)
			else
				redis.call("PUBLISH", "` + wakePrefix + `" .. locker, fence .. " " .. ttl .. " " .. token .. " " .. K)
			end
		end
	end
end
`

// acquireScript makes one attempt to take the key for a token, in a mode.
//
//	KEYS    scriptKeys(key)
//	ARGV[1] token
//	ARGV[2] the id of the caller's Locker
//	ARGV[3] lease (ttl) in ms, >= 1
//	ARGV[4] "1" to issue a fence, "0" not to
//	ARGV[5] how long to keep a place in line, in ms; "0": a single attempt
//	        that takes no place
//	ARGV[6] "1" to take a place (a token's first attempt, or a single
//	        attempt), "0" to renew the place the token has: a place is taken
//	        once per token, so that a place confirmed by a reply was taken
//	        before any hand-off to its token (a hand-off removes the place
//	        for good). A renewal never takes a free key: only a hand-off to
//	        its place gives it the key (a copy of it that runs after the
//	        hand-off's lease ran out takes nothing).
//	ARGV[7] the mode: "x" exclusive, "s" shared, or a number of permits
//	ARGV[8] the holder's description, "" for none (see WithHolder)
//	KEYS[9] the release mark of ARGV[1] (see releaseScript)
//	returns {1, fence} when the token holds the key now, with the lease
//	        ARGV[3] from now or longer: it fit with nobody in line, it was
//	        handed to the token by an earlier script (the waiter had not
//	        heard yet), or an earlier attempt whose reply was lost had taken
//	        it (a lease that ends later already is left as it is). fence is
//	        a new fence, or 0 without ARGV[4].
//	        {0, ms} when it does not fit: ms is how long until a holder in
//	        the way may end (-1: unknown). With ARGV[5] > 0 the token now
//	        has a place in line, kept ARGV[5] ms from now.
//	        {-1, ms} when the token was to renew its place, and has none:
//	        the place lapsed, or the key was handed to it and that lease ran
//	        out; or when the token is spent (its release mark exists: it was
//	        released, or given up): a late copy of an attempt, which changes
//	        nothing. The token must not be used again.
//	        An error reply when the fence could not be issued (the token
//	        then holds nothing), when a waiter that wants a fence finds the
//	        counter unusable (it leaves the line), when a semaphore of
//	        another number of permits is held or waited for, or (WRONGTYPE)
//	        when a semaphore's permits are asked for on a lock's key or a
//	        shared lock on a semaphore's (nothing changed).
var acquireScript = redis.NewScript(lineLua + `
local token, ttl, fenced, keep, mode = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[7]
if redis.call("EXISTS", KEYS[9]) == 1 then
	return {-1, -1}
end
if mode ~= "x" then
	local kind = kindOf()
	if kind and mode ~= "s" and kind ~= mode then
		if kind == "lock" then
			return redis.error_reply("WRONGTYPE redislock: the key is a lock's, not a semaphore's")
		end
		return redis.error_reply("ERR redislock: the semaphore has " .. kind .. " permits, not " .. mode)
	elseif kind and mode == "s" and kind ~= "lock" then
		return redis.error_reply("WRONGTYPE redislock: the key is a semaphore's, not a read-write lock's")
	end
end
local queued = redis.call("EXISTS", QUEUE) == 1
if queued then
	handoff(false) -- to the first in line, if it fits: maybe this token
	queued = redis.call("EXISTS", QUEUE) == 1
end
local mine = holds(token, mode)
if mine or (ARGV[6] == "1" and not queued and fits(mode)) then
	local fence, err = askedFence(fenced)
	if not fence then
		if drop(token, mode) then
			handoff(false)
		end
		return redis.error_reply(err)
	end
	if mine then
		extend(token, mode, ttl)
	else
		take(token, mode, ttl, ARGV[8])
	end
	leave(token)
	return {1, fence}
end
if keep > 0 then
	local problem = fenced == "1" and fenceProblem()
	if problem then
		leave(token)
		return redis.error_reply(problem)
	end
	if ARGV[6] == "0" and redis.call("HEXISTS", PLACES, token) == 0 then
		return {-1, blockedFor(mode)}
	end
	place(token, keep, ttl, fenced, mode, ARGV[2], ARGV[8])
end
return {0, blockedFor(mode)}`)

// attemptArgs are the arguments of one acquireScript run.
type attemptArgs struct {
	key, token, locker string
	holder             string // the holder's description, "" for none
	ttl                time.Duration
	fenced             bool
	mode               mode
	place              time.Duration // how long to keep a place; 0: a single attempt
	renew              bool          // renew the token's place, do not take one
}

// attemptResult is the outcome of an acquireScript run.
type attemptResult struct {
	ours    bool
	fence   int64         // when ours
	pttl    time.Duration // when not ours: how long a holder in the way may stay, < 0 if unknown
	noPlace bool          // a renewal found no place: the token is spent
}

// call returns the acquireScript run of a.
func (a attemptArgs) call() scriptCall {
	return scriptCall{acquireScript, append(scriptKeys(a.key), markKey(a.key, a.token)),
		[]any{a.token, a.locker, a.ttl.Milliseconds(), flag(a.fenced), a.place.Milliseconds(), flag(!a.renew), a.mode.arg(), a.holder}}
}

// markKey is the release mark of token's hold of key (see releaseScript).
func markKey(key, token string) string { return sideKey(key, releasedKind+":"+token) }

// runAttempt runs acquireScript.
func runAttempt(ctx context.Context, c redis.Scripter, a attemptArgs) (attemptResult, error) {
	s := a.call()
	return parseAttempt(a, s.script.Run(ctx, c, s.keys, s.args...))
}

// parseAttempt reads the reply to the acquireScript run of a.
func parseAttempt(a attemptArgs, cmd *redis.Cmd) (attemptResult, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		if strings.Contains(err.Error(), "redislock: the semaphore has") {
			err = fmt.Errorf("%w: WithPermits(%d): %w", ErrInvalidOption, a.mode.permits, err)
		}
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

// releaseScript ends a hold or leaves the line, and hands the key to the
// first in line while it fits.
//
// The release mark of a token (KEYS[9]) says, for a while, that the token
// is spent: its hold was released ("r <handoffs> <token> <fence> <lease>
// ...": the run's result, for a run that comes again), or it was given up
// without holding anything ("s"). An attempt of a spent token changes
// nothing (see acquireScript): a late copy of it, which go-redis sent
// again after a timeout, cannot take the key or a place after its Obtain
// gave up or its lock was released.
//
//	KEYS    scriptKeys(key), then (KEYS[9]) the release mark of ARGV[1]
//	ARGV[1] token to release, or to take out of line
//	ARGV[2] the id of the caller's Locker
//	ARGV[3] another token to take out of line (the place of a line of the
//	        caller's Locker that nobody waits in any more), or ""
//	ARGV[4] how long to keep the release mark, in ms; "0": no mark
//	ARGV[5] the mode ARGV[1] holds the key in
//	ARGV[6] "1" to mark ARGV[1] spent also when it held nothing (with
//	        ARGV[4] > 0), "0" not to
//	returns {released, handoffs, token, fence, lease, token, fence, lease, ...}:
//	        released is 1 when ARGV[1] held the key and no longer does, or
//	        when the mark says that an earlier run of this release did that
//	        (its reply was lost, and go-redis sent it again), else 0 (the key
//	        was untouched, and ARGV[1] is no longer in line); handoffs is
//	        how many places in line got the key; then the hand-offs to
//	        places of the caller's Locker (see handoff), those of the
//	        earlier run included.
var releaseScript = redis.NewScript(lineLua + `
local token, mode, keep = ARGV[1], ARGV[5], ARGV[4]
local released, before = 0, {}
if drop(token, mode) then
	released = 1
else
	local mark = keep ~= "0" and redis.call("GET", KEYS[9])
	if mark and string.sub(mark, 1, 1) == "r" then
		released = 1 -- by an earlier run of this release, whose reply was lost
		for word in string.gmatch(string.sub(mark, 2), "%S+") do
			before[#before + 1] = word
		end
	else
		leave(token)
	end
end
if ARGV[3] ~= "" then
	leave(ARGV[3])
end
local mine, n = handoff(true)
if keep ~= "0" and released == 1 and #before == 0 then
	redis.call("SET", KEYS[9], "r " .. n .. " " .. table.concat(mine, " "), "PX", keep)
elseif keep ~= "0" and released == 0 and ARGV[6] == "1" then
	redis.call("SET", KEYS[9], "s", "PX", keep, "NX")
end
local reply = {released, n}
if #before > 0 then
	reply[2] = n + tonumber(before[1])
	for i = 2, #before, 3 do
		reply[#reply + 1] = before[i]
		reply[#reply + 1] = tonumber(before[i + 1])
		reply[#reply + 1] = tonumber(before[i + 2])
	end
end
for _, v in ipairs(mine) do
	reply[#reply + 1] = v
end
return reply`)

// releaseArgs are the arguments of one releaseScript run.
type releaseArgs struct {
	key, token, locker string
	mode               mode
	leave              string        // a place to take out of line too, or ""
	mark               time.Duration // how long to keep the release mark; 0: none
	spend              bool          // mark the token spent also when it held nothing
}

// releaseResult is the outcome of a releaseScript run.
type releaseResult struct {
	released bool
	handoffs int       // places in line that got the key
	handed   []handoff // hand-offs to places of the caller's Locker
}

// handoff is a hand-off of the key to a token (a line's): fence is its
// fence, 0 for none, -1 when it could not be issued (the place was dropped);
// lease is the lease it got.
type handoff struct {
	token string
	fence int64
	lease time.Duration
}

// runRelease runs releaseScript.
func runRelease(ctx context.Context, c redis.Scripter, a releaseArgs) (releaseResult, error) {
	keys := append(scriptKeys(a.key), markKey(a.key, a.token))
	res, err := releaseScript.Run(ctx, c, keys, a.token, a.locker, a.leave, a.mark.Milliseconds(), a.mode.arg(), flag(a.spend)).Slice()
	if err != nil {
		return releaseResult{}, err
	}
	if len(res) < 2 || len(res)%3 != 2 {
		return releaseResult{}, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	released, _ := res[0].(int64)
	handoffs, _ := res[1].(int64)
	r := releaseResult{released: released == 1, handoffs: int(handoffs)}
	for i := 2; i < len(res); i += 3 {
		token, _ := res[i].(string)
		fence, _ := res[i+1].(int64)
		lease, _ := res[i+2].(int64)
		r.handed = append(r.handed, handoff{token: token, fence: fence, lease: time.Duration(lease) * time.Millisecond})
	}
	return r, nil
}

// genLua defines newerGen, the generation check of the scripts that set a
// lease (see leaseClock): it returns false when Redis has run a command of a
// later generation for the token, whose lease then must not change, and
// else records gen, keeping GENS at least as long as the lease of ttl ms
// the command sets: every command of a generation above 0 extends it, so
// that the record outlives the token's hold, and a late copy of an older
// generation is refused whenever it comes.
const genLua = `
local function newerGen(gens, token, gen, ttl)
	gen = tonumber(gen)
	local ran = tonumber(redis.call("HGET", gens, token) or "0")
	if gen < ran then
		return false
	end
	if gen > ran then
		redis.call("HSET", gens, token, gen)
	end
	if gen > 0 and redis.call("PTTL", gens) < tonumber(ttl) then
		redis.call("PEXPIRE", gens, ttl)
	end
	return true
end
`

// refreshScript extends the lease of the lock if it is still ours, and
// issues it a fence when asked.
//
//	KEYS    the lock key, the fence counter, gens, holders
//	ARGV[1] token
//	ARGV[2] new ttl in milliseconds (>= 1)
//	ARGV[3] "1" to issue a new fence, "0" not to
//	ARGV[4] the command's generation (see leaseClock)
//	returns {1, fence} when the key held the token and its ttl was set to
//	        ARGV[2] (fence: the new fence, or 0),
//	        {2, 0} when the key holds the token but Redis has run a command
//	        of a later generation for it: nothing changed,
//	        {0, 0} when the key is absent or holds another token (nothing
//	        changed). An error reply when the fence could not be issued
//	        (nothing changed).
var refreshScript = redis.NewScript(fenceLua + genLua + `
if redis.pcall("GET", KEYS[1]) ~= ARGV[1] then
	return {0, 0} -- gone, another's, or data of another kind: not held
end
if not newerGen(KEYS[3], ARGV[1], ARGV[4], ARGV[2]) then
	return {2, 0}
end
local fence, err = askedFence(ARGV[3])
if not fence then
	return redis.error_reply(err)
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
if redis.call("HEXISTS", KEYS[4], ARGV[1]) == 1 then
	redis.call("PEXPIRE", KEYS[4], ARGV[2])
end
return {1, fence}`)

// refreshArgs are the arguments of a refresh: a renewal of token's lease
// in mode to ttl, of generation gen, issuing a fence when fenced.
type refreshArgs struct {
	key, token string
	mode       mode
	ttl        time.Duration
	gen        int64
	fenced     bool
}

// call returns the script run of a: refreshScript for an exclusive
// holder, holderRefreshScript for others.
func (a refreshArgs) call() scriptCall {
	argv := []any{a.token, a.ttl.Milliseconds(), flag(a.fenced), a.gen}
	if a.mode.exclusive() {
		return scriptCall{refreshScript, []string{a.key, sideKey(a.key, fenceKind), sideKey(a.key, gensKind), sideKey(a.key, holdersKind)}, argv}
	}
	return scriptCall{holderRefreshScript, scriptKeys(a.key), append(argv, a.mode.arg())}
}

// refreshResult is the outcome of a refresh: held reports that the token
// held the key, set that its lease was set (not refused as of an older
// generation), fence the fence issued.
type refreshResult struct {
	held, set bool
	fence     int64
}

// parseRefresh reads a refresh script's reply.
func parseRefresh(cmd *redis.Cmd) (refreshResult, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return refreshResult{}, err
	}
	if len(res) != 2 {
		return refreshResult{}, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	return refreshResult{held: res[0] != 0, set: res[0] == 1, fence: res[1]}, nil
}

// runRefresh runs refreshScript (or holderRefreshScript).
func runRefresh(ctx context.Context, c redis.Scripter, a refreshArgs) (refreshResult, error) {
	s := a.call()
	return parseRefresh(s.script.Run(ctx, c, s.keys, s.args...))
}

// holderRefreshScript extends the lease of a shared holder or permit if it
// is still held, and issues it a fence when asked.
//
//	KEYS    scriptKeys(key)
//	ARGV[1] token
//	ARGV[2] new ttl in milliseconds (>= 1)
//	ARGV[3] "1" to issue a new fence, "0" not to
//	ARGV[4] the command's generation (see leaseClock)
//	ARGV[5] the mode: "s" or a number of permits
//	returns what refreshScript returns.
var holderRefreshScript = redis.NewScript(lineLua + genLua + `
local token, mode = ARGV[1], ARGV[5]
if not holds(token, mode) then
	return {0, 0}
end
if not newerGen(GENS, token, ARGV[4], ARGV[2]) then
	return {2, 0}
end
local fence, err = askedFence(ARGV[3])
if not fence then
	return redis.error_reply(err)
end
take(token, mode, ARGV[2])
return {1, fence}`)

// holderPTTLScript reports the remaining lease of a shared holder or permit.
//
//	KEYS    scriptKeys(key)
//	ARGV[1] token
//	ARGV[2] the mode: "s" or a number of permits
//	returns the remaining lease in ms (>= 0) when the token holds the key,
//	        -2 when it does not.
var holderPTTLScript = redis.NewScript(lineLua + `
local lease = redis.call("ZSCORE", holderSet(ARGV[2]), ARGV[1])
if lease and tonumber(lease) >= now then
	return tonumber(lease) - now
end
return -2`)

// pttlScript reports the remaining lease of the lock if it is still ours.
//
//	KEYS[1] lock key
//	ARGV[1] token
//	returns the key's remaining ttl in milliseconds (>= 0) when it holds the token,
//	        -2 when the key is absent or holds another token.
var pttlScript = redis.NewScript(`
if redis.pcall("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PTTL", KEYS[1])
end
return -2`)

// runPTTL runs pttlScript (or holderPTTLScript).
func runPTTL(ctx context.Context, c redis.Scripter, key, token string, m mode) (time.Duration, error) {
	var ms int64
	var err error
	if m.exclusive() {
		ms, err = pttlScript.Run(ctx, c, []string{key}, token).Int64()
	} else {
		ms, err = holderPTTLScript.Run(ctx, c, scriptKeys(key), token, m.arg()).Int64()
	}
	return time.Duration(ms) * time.Millisecond, err
}

// inspectScript reads who holds a lock key, and how many wait for it. It
// writes nothing.
//
//	KEYS    scriptKeys(key)
//	returns {mode, permits, fence, waiting, token, ttl, token, ttl, ...}:
//	        mode "x" (an exclusive holder), "s" (shared holders), "p" (a
//	        semaphore's permits), "o" (the key holds data of another kind)
//	        or "" (nobody holds the key); permits, a
//	        semaphore's number of permits (0 for other modes); fence, the
//	        fence counter as stored ("" if none); waiting, the live places
//	        in line; then each holder's token, remaining lease (ms) and
//	        description ("" if none).
var inspectScript = redis.NewScript(lineLua + `
local mode, permits, held = "", 0, {}
local function live(z)
	local rs = redis.call("ZRANGEBYSCORE", z, now, "+inf", "WITHSCORES")
	for i = 1, #rs, 2 do
		held[#held + 1] = rs[i]
		held[#held + 1] = tonumber(rs[i + 1]) - now
		held[#held + 1] = redis.call("HGET", HOLDERS, rs[i]) or ""
	end
end
local t = redis.call("TYPE", K).ok
if t == "string" then
	local token = redis.call("GET", K)
	mode, held = "x", {token, redis.call("PTTL", K), redis.call("HGET", HOLDERS, token) or ""}
elseif t == "zset" then
	mode, permits = "p", tonumber(redis.call("GET", LIMIT) or "0")
	live(K)
elseif t ~= "none" then
	mode = "o"
else
	live(READERS)
	if #held > 0 then
		mode = "s"
	end
end
local waiting = 0
for _, v in ipairs(redis.call("HVALS", PLACES)) do
	if tonumber(string.match(v, "^(%d+)") or "0") >= now then
		waiting = waiting + 1
	end
end
local reply = {mode, permits, redis.call("GET", FENCE) or "", waiting}
for _, v in ipairs(held) do
	reply[#reply + 1] = v
end
return reply`)

// runInspect runs inspectScript.
func runInspect(ctx context.Context, c redis.Scripter, key string) (Info, error) {
	res, err := inspectScript.Run(ctx, c, scriptKeys(key)).Slice()
	if err != nil {
		return Info{}, err
	}
	if len(res) < 4 || len(res)%3 != 1 {
		return Info{}, fmt.Errorf("redislock: unexpected reply %v", res)
	}
	mode, _ := res[0].(string)
	permits, _ := res[1].(int64)
	fence, _ := res[2].(string)
	waiting, _ := res[3].(int64)
	info := Info{Key: key, Mode: map[string]string{"x": ModeExclusive, "s": ModeShared, "p": ModeSemaphore, "o": ModeOther}[mode], Permits: int(permits), Waiting: int(waiting)}
	info.Fence, _ = strconv.ParseInt(fence, 10, 64)
	for i := 4; i < len(res); i += 3 {
		token, _ := res[i].(string)
		ms, _ := res[i+1].(int64)
		desc, _ := res[i+2].(string)
		info.Holders = append(info.Holders, Holder{Token: token, Description: desc, TTL: time.Duration(ms) * time.Millisecond})
	}
	return info, nil
}

// fenceStepScript is a step of a quorum Locker's fence (see quorum.fence):
// it increments the fence counter, or raises it to a value. Like every
// script that issues fences (see fenceLua), it keeps the counter within
// 2^53-1, where Lua's numbers are exact, and refuses a counter that is not
// a non-negative integer below that.
//
//	KEYS[1] the lock key (for its Cluster slot), KEYS[2] its fence counter
//	ARGV[1] "0" to increment the counter, or a value to raise it to
//	returns the counter's value after the step (a raise that finds the
//	        counter at the value or above returns it as it is, a string). An
//	        error reply, having changed nothing, when the counter holds
//	        something else than a non-negative integer, when an increment
//	        finds it at 2^53-1 or beyond, or when ARGV[1] is beyond 2^53-1.
var fenceStepScript = redis.NewScript(fenceLua + `
if ARGV[1] == "0" then
	local fence, err = issueFence()
	if not fence then
		return redis.error_reply(err)
	end
	return fence
end
local to = tonumber(ARGV[1])
if to > ` + maxFenceLua + ` then
	return redis.error_reply("ERR redislock: a fence counter cannot be raised beyond 2^53-1 (the largest integer Lua holds exactly)")
end
local v = redis.pcall("GET", KEYS[2])
if type(v) == "table" or (v and not string.match(v, "^%d+$")) then
	return redis.error_reply("ERR redislock: the fence counter holds something else than a non-negative integer")
elseif v and tonumber(v) >= to then
	return v -- at least to already (exactly, as a string, however large)
end
redis.call("SET", KEYS[2], ARGV[1])
return to`)

// runFenceStep runs fenceStepScript on key's counter: to is 0 to increment
// it, or the value to raise it to. An error reply is an error: the step
// did not run.
func runFenceStep(ctx context.Context, c redis.Scripter, key string, to int64) (int64, error) {
	return fenceStepScript.Run(ctx, c, []string{key, sideKey(key, fenceKind)}, to).Int64()
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
