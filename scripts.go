package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the line and of the lock family (read-write locks,
// semaphores), each next to the Go helper that builds its KEYS and ARGV.
// The plain lock's scripts are in plain.go. A script compares the whole
// token stored for a holder with the caller's before acting, so a holder
// whose lease expired can never touch the hold of the holder that came
// after it; Redis runs a script atomically, so nothing can happen between
// the comparison and the action.
//
// They are go-redis Scripts: run with EVALSHA, and loaded again with EVAL
// when Redis answers NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover), so they never need to be loaded by hand.
//
// The data of one lock key K (layout rl1, see keys.go), all in K's Redis
// Cluster slot, the side keys named by keyspace.side:
//
//	K        the holders: a string, the token of an exclusive holder (a
//	         plain lock, or the writer of a read-write lock), with the lease
//	         as its expiry; or a sorted set of the holders of a shared mode,
//	         each token scored with the end of its lease (ms, Redis clock),
//	         and one member scored 0 that says which mode: "rl1:shared" (the
//	         readers of a read-write lock) or "rl1:permits:<n>" (a
//	         semaphore of n permits). The set expires with its last lease.
//	         This is how the library knows its own data: a string that does
//	         not start with "rl1:", or a key of another type, or a sorted set
//	         without such a member, was not written by it, and is never
//	         changed (see holders and ErrWrongKind).
//	line     list of the tokens of the places in line, first in line first
//	places   hash token -> "deadline ttl fenced mode pub channel desc":
//	         until when (ms, Redis clock) the place is kept, the lease (ms),
//	         fencing ("1" or "0") and mode ("x" exclusive, "s" shared, or a
//	         semaphore's number of permits) to hand the key over with, how
//	         to announce the hand-off ("p": PUBLISH, "s": SPUBLISH) and on
//	         which channel, and the holder's description. And the field
//	         "~spent" while a spent token of K may be marked (see spendLua):
//	         it keeps the plain scripts off the key.
//	gens     hash token -> the highest generation of the lease commands
//	         Redis ran for that holder (see leaseClock); only holders whose
//	         lease length changed have one. It expires with the longest
//	         lease it was set with.
//	holders  hash token -> the holder's description (WithHolder), for
//	         Inspect; it expires with the holders' last lease, and a
//	         holder's entry goes when its hold ends
//	spent:T  the mark of a spent token T (see spendLua)
//	fence    the fence counter of K's hash slot (keyspace.fence; no expiry)
//
// Lapsed holders of a sorted set are removed by every script that looks at
// them, so a holder that died frees its share at the end of its own lease.
//
// Invariant: while the line is not empty, its first place cannot take the
// key (it does not fit). Whoever finds that it fits (a release, or an
// attempt after a lease expired) hands the key to it in the same script,
// and to the places after it while they fit too: all readers up to the
// next writer, permits while there are some. So nothing can overtake a place
// in line, and a waiter never sends anything to take a key handed to it.
// A hand-off gives the place's waiter its lease, but not beyond the place's
// deadline: the waiter proved it was alive when it last renewed its place,
// no more, so a waiter that died holds the key at most until then (see
// line.go).

// familyKeys returns the KEYS of the scripts of the line and the family on
// the lock at Redis key rkey (the lock on key): the lock key, line, places,
// gens, holders, the fence counter, and the spent mark of token (when
// token is not "").
func (ks keyspace) familyKeys(rkey, key, token string) []string {
	keys := []string{rkey, ks.side(rkey, key, lineKind), ks.side(rkey, key, placesKind),
		ks.side(rkey, key, gensKind), ks.side(rkey, key, holdersKind), ks.fence(rkey)}
	if token != "" {
		keys = append(keys, ks.side(rkey, key, spentKind+":"+token))
	}
	return keys
}

// fenceLua defines issueFence, which issues the next fence of a counter,
// and fenceProblem, which says why it cannot.
//
// Fences stop at 2^53-1 (maxFenceLua): Lua's numbers are doubles, exact up to
// 2^53, and a fence rounded on its way out of a script would repeat. A
// counter at 2^53-1 or beyond, or holding something else than a
// non-negative integer, issues no fence: issueFence returns nil and the
// reason, having changed nothing.
const fenceLua = `
local function fenceProblem(counter)
	local f = redis.pcall("GET", counter)
	if type(f) == "table" then
		return "the fence counter holds data of another type"
	elseif not f then
		return nil
	elseif not string.match(f, "^%d+$") then
		return "the fence counter holds something else than a non-negative integer"
	elseif tonumber(f) >= ` + maxFenceLua + ` then
		return "the fence counter is at its maximum (2^53-1, the largest integer Lua holds exactly)"
	end
	return nil
end

local function issueFence(counter)
	local problem = fenceProblem(counter)
	if problem then
		return nil, problem
	end
	return redis.call("INCR", counter)
end
`

// maxFenceLua is the largest fence a script issues, 2^53-1, as Lua reads it.
const maxFenceLua = "9007199254740991"

// genLua defines newerGen, the generation check of the scripts that set a
// lease (see leaseClock): it returns false when Redis has run a command of a
// later generation for the token, whose lease then must not change, and
// else records gen, keeping gens at least as long as the lease of ttl ms
// the command sets: every command of a generation above 0 extends it, so
// that the record outlives the token's hold, and a late copy of an older
// generation is refused whenever it comes.
const genLua = `
local function newerGen(gens, token, gen, ttl)
	gen = tonumber(gen)
	local ran = tonumber(redis.pcall("HGET", gens, token) or "0") or 0
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

// familyLua is the prelude of the scripts of the line and the family: their
// KEYS (see familyKeys), Redis's clock, and the helpers of the data model.
//
// Scripts may call TIME since Redis 5 (they are replicated by their
// effects). Every script issues a fence before it sets the key, so that a
// fence that cannot be issued leaves no lock.
const familyLua = fenceLua + `
local K, LINE, PLACES, GENS, HOLDERS, FENCE, SPENT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local SHARED, PERMITS = "rl1:shared", "rl1:permits:"
local PLACE = "^(%d+) (%d+) ([01]) (%w+) ([ps]) (%S+) (.*)$"
local given = {} -- token -> the fence a hand-off of this script gave it (0: none)

-- sets the expiry of key k to ms from now, unless it ends later already
local function lengthen(k, ms)
	local left = redis.call("PTTL", k)
	if left == -1 or (left >= 0 and left < tonumber(ms)) then
		redis.call("PEXPIRE", k, ms)
	end
end

-- what K holds, as this layout wrote it: "" (nothing), "x" (an exclusive
-- holder), "s" (shared holders), or a semaphore's number of permits; for a
-- string this layout did not write, "?": another owner's lock, waited for
-- like any other holder, never changed; for anything else this layout did
-- not write, nil and what it is
local function holders()
	local t = redis.call("TYPE", K).ok
	if t == "none" then
		return ""
	end
	local mark
	if t == "string" then
		mark = redis.call("GET", K)
		if string.sub(mark, 1, 4) == "rl1:" then
			return "x"
		end
	elseif t == "zset" then
		local first = redis.call("ZRANGE", K, 0, 0, "WITHSCORES")
		if first[2] == "0" then
			mark = first[1]
			if mark == SHARED then
				return "s"
			end
			local n = string.match(mark, "^rl1:permits:(%d+)$")
			if n then
				return n
			end
		end
	end
	local other = mark and string.match(mark, "^rl(%d+):")
	if other and other ~= "1" then -- (an unknown mark of layout 1 is not ours)
		return nil, "layout" .. other
	elseif t == "string" then
		return "?"
	end
	return nil, t
end

-- makes the holders K (a sorted set) expire with their last lease; K goes
-- when nobody holds it any more (each holder's description goes with it:
-- see drop and prune; the holders key itself is never deleted as a whole,
-- nor given an expiry shorter than its descriptions')
local function setExpiry()
	local last = redis.call("ZRANGE", K, -1, -1, "WITHSCORES")
	if last[2] and tonumber(last[2]) > 0 then
		redis.call("PEXPIREAT", K, last[2])
	else
		redis.call("DEL", K)
	end
end

-- removes the holders of K (a sorted set) whose lease ended. A lease that
-- ends at e (ms, Redis clock, cut to the millisecond) lasts while now <= e:
-- a holder set at E for ttl (e = floor(E) + ttl) keeps its share until at
-- least E + ttl, as a key with PX ttl does, and K expires with it (Redis
-- expires a key at PEXPIREAT e once its clock is past e).
local function prune()
	local lapsed = redis.call("ZRANGEBYSCORE", K, "(0", "(" .. now)
	if #lapsed > 0 then
		redis.call("ZREMRANGEBYSCORE", K, "(0", "(" .. now)
		redis.pcall("HDEL", HOLDERS, unpack(lapsed))
		redis.pcall("HDEL", GENS, unpack(lapsed))
		setExpiry()
	end
end

-- whether a holder of mode could take K, which holds kind, now
local function fits(mode, kind)
	if kind == "" then
		return true
	elseif mode == "x" or kind ~= mode then
		return false
	elseif mode == "s" then
		return true
	end
	prune()
	return redis.call("ZCARD", K) <= tonumber(mode) -- the mode's member and fewer than n holders
end

-- whether token holds K, which holds kind, in mode
local function holds(token, mode, kind)
	if kind ~= mode then
		return false
	elseif mode == "x" then
		return redis.call("GET", K) == token
	end
	local lease = redis.call("ZSCORE", K, token)
	return lease and tonumber(lease) >= now
end

-- makes token hold K in mode for ms from now; desc ("": none) describes
-- the holder
local function take(token, mode, ms, desc)
	if mode == "x" then
		redis.call("SET", K, token, "PX", ms)
	else
		if redis.call("EXISTS", K) == 0 then
			local member = SHARED
			if mode ~= "s" then
				member = PERMITS .. mode
			end
			redis.call("ZADD", K, 0, member)
		end
		redis.call("ZADD", K, now + ms, token)
		lengthen(K, ms)
	end
	if desc ~= "" then
		redis.call("HSET", HOLDERS, token, desc)
		lengthen(HOLDERS, ms)
	end
end

-- sets the lease of token, which holds K in mode, to ms from now, unless it
-- ends later already: a late copy of an attempt (go-redis sent it again,
-- and the first copy ran after) never shortens a lease that a Refresh or a
-- hand-off set since (see leaseClock)
local function extend(token, mode, ms)
	if mode == "x" then
		lengthen(K, ms)
	else
		redis.call("ZADD", K, "GT", now + ms, token)
		lengthen(K, ms)
	end
	if redis.pcall("HEXISTS", HOLDERS, token) == 1 then
		lengthen(HOLDERS, ms)
	end
end

-- ends token's hold of K, which holds kind, in mode; returns whether it
-- held K
local function drop(token, mode, kind)
	local held = false
	if kind == mode and mode == "x" then
		if redis.call("GET", K) == token then
			redis.call("DEL", K)
			held = true
		end
	elseif kind == mode then
		prune()
		if redis.call("ZREM", K, token) == 1 then
			setExpiry()
			held = true
		end
	end
	if held then -- side keys another client broke do not undo the release
		redis.pcall("HDEL", GENS, token)
		redis.pcall("HDEL", HOLDERS, token)
	end
	return held
end

-- how long until a holder that keeps mode from fitting K, which holds kind,
-- may end (ms): -1 when it has no expiry (a string this layout did not
-- write: it will not end by itself), -2 when no holder is in the way (only
-- the line is)
local function blockedFor(mode, kind)
	if kind == "x" or kind == "?" then
		return redis.call("PTTL", K)
	elseif kind == "" or (mode == "s" and kind == "s") then
		return -2
	end
	local first = redis.call("ZRANGEBYSCORE", K, "(0", "+inf", "WITHSCORES", "LIMIT", 0, 1)
	if first[2] then
		return math.max(tonumber(first[2]) - now, 0)
	end
	return -2
end

-- the mode of the first live place in line, or nil
local function lineMode()
	for _, token in ipairs(redis.call("LRANGE", LINE, 0, -1)) do
		local deadline, mode
		local value = redis.call("HGET", PLACES, token)
		if value then
			deadline, _, _, mode = string.match(value, PLACE)
		end
		if deadline and tonumber(deadline) >= now then
			return mode
		end
	end
	return nil
end

-- why a holder of mode can never take K, which holds kind: {-2, what K
-- holds} for another kind of lock, {-3, n} for a semaphore of another n;
-- nil when it can (once the holders in its way are gone)
local function mismatch(mode, kind)
	local have = kind
	if kind == "" then
		have = lineMode()
		if not have then
			return nil
		end
	end
	local lock = {x = true, s = true, ["?"] = true}
	if lock[mode] and lock[have] then
		return nil
	elseif lock[mode] then
		return {-2, "permits:" .. have}
	elseif have == "?" then
		return {-2, "string"}
	elseif lock[have] then
		return {-2, have}
	elseif have ~= mode then
		return {-3, tonumber(have)}
	end
	return nil
end

-- keeps a place in line for token for keep ms
local function place(token, keep, ttl, fenced, mode, pub, channel, desc)
	local value = (now + keep) .. " " .. ttl .. " " .. fenced .. " " .. mode .. " " .. pub .. " " .. channel .. " " .. desc
	if redis.call("HSET", PLACES, token, value) == 1 then
		redis.call("RPUSH", LINE, token)
	end
	lengthen(LINE, 2 * keep)
	lengthen(PLACES, 2 * keep)
end

-- takes token's place out of line, if it has one
local function leave(token)
	if redis.call("HDEL", PLACES, token) == 1 then
		redis.call("LREM", LINE, 1, token)
	end
end

-- Hands K to the first place in line while it fits: one exclusive holder,
-- or shared holders up to the next exclusive one, or permits while some are
-- free. Each gets its lease, but not beyond its place's deadline. Lapsed
-- places (their waiter stopped renewing them) are dropped on the way, and
-- so is a place whose fence cannot be issued (told with fence -1). Each
-- hand-off is announced on the place's channel, "<fence> <lease> <token>
-- <key>", except those on the channel mine (when not nil): those are
-- returned instead, as a flat list token, fence, lease. The second result
-- is the number of hand-offs.
local function handoff(mine)
	local own, n = {}, 0
	while true do
		local token = redis.call("LINDEX", LINE, 0)
		if not token then
			return own, n
		end
		local value = redis.call("HGET", PLACES, token)
		local deadline, ttl, fenced, mode, pub, channel, desc
		if value then
			deadline, ttl, fenced, mode, pub, channel, desc = string.match(value, PLACE)
		end
		local live = deadline and tonumber(deadline) >= now
		if live and not fits(mode, holders()) then
			return own, n
		end
		redis.call("LPOP", LINE)
		redis.call("HDEL", PLACES, token)
		if live then
			local fence = 0
			if fenced == "1" then
				fence = issueFence(FENCE) or -1
			end
			if fence >= 0 then
				take(token, mode, math.min(tonumber(ttl), tonumber(deadline) - now + 1), desc)
				given[token] = fence
				n = n + 1
			end
			if fence >= 0 and channel == mine then
				own[#own + 1] = token
				own[#own + 1] = fence
				own[#own + 1] = tonumber(ttl)
			else
				local cmd = "PUBLISH"
				if pub == "s" then
					cmd = "SPUBLISH"
				end
				redis.call(cmd, channel, fence .. " " .. ttl .. " " .. token .. " " .. K)
			end
		end
	end
end
`

// spendLua defines spend, which marks a token spent for ms: an attempt of
// a spent token changes nothing (see acquireScript), so that a copy of it
// that go-redis sent again, and that runs after its Obtain gave up or its
// lock was released, takes neither the key nor a place. A token is marked
// only when such a copy may exist (see counted): the mark (spent:T) is the
// exception, not one per release. While a mark may exist, the places key
// has a "~spent" field and lasts at least as long, which keeps the plain
// scripts (which look at no mark) off the key.
const spendLua = `
local function spend(ms)
	redis.call("SET", SPENT, "1", "PX", ms)
	redis.call("HSET", PLACES, "~spent", "1")
	lengthen(PLACES, ms)
end
`

// acquireScript makes one attempt to take the key for a token, in a mode,
// with the line and the family's rules.
//
//	KEYS    familyKeys(key, token)
//	ARGV[1] token
//	ARGV[2] lease (ttl) in ms, >= 1
//	ARGV[3] "1" to issue a fence, "0" not to
//	ARGV[4] how long to keep a place in line, in ms; "0": a single attempt
//	        that takes no place
//	ARGV[5] "1" to take a place (a token's first attempt, or a single
//	        attempt), "0" to renew the place the token has: a place is taken
//	        once per token, so that a place confirmed by a reply was taken
//	        before any hand-off to its token (a hand-off removes the place
//	        for good). A renewal never takes a free key: only a hand-off to
//	        its place gives it the key (a copy of it that runs after the
//	        hand-off's lease ran out takes nothing).
//	ARGV[6] the mode: "x" exclusive, "s" shared, or a number of permits
//	ARGV[7] "p" or "s": how a hand-off to the place is announced (PUBLISH,
//	        or SPUBLISH on a Cluster)
//	ARGV[8] the channel it is announced on
//	ARGV[9] the holder's description, "" for none (see WithHolder)
//	returns {1, fence} when the token holds the key now, with the lease
//	        ARGV[2] from now or longer: it fit with nobody in line, it was
//	        handed to the token by an earlier script (the waiter had not
//	        heard yet), or an earlier attempt whose reply was lost had taken
//	        it (a lease that ends later already is left as it is). fence is
//	        a new fence, or 0 without ARGV[3].
//	        {0, ms} when it does not fit: ms is blockedFor's. With ARGV[4] > 0
//	        the token now has a place in line, kept ARGV[4] ms from now.
//	        {-1, ms} when the token was to renew its place, and has none:
//	        the place lapsed, or the key was handed to it and that lease ran
//	        out; or when the token is spent: a late copy of an attempt,
//	        which changes nothing. The token must not be used again.
//	        {-2, what} when the key holds (or its line waits for) another
//	        kind of lock or data, which the mode can never share: "x", "s",
//	        "permits:<n>", "string", "layout<n>", or a Redis type; nothing
//	        changed.
//	        {-3, n} when the key is a semaphore of n permits, not ARGV[6];
//	        nothing changed.
//	        {-4, why} when the fence could not be issued (the token then
//	        holds nothing, and has no place).
var acquireScript = redis.NewScript(familyLua + `
local token, ttl, fenced, keep, first, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5] == "1", ARGV[6]
if redis.call("EXISTS", SPENT) == 1 then
	return {-1, -2}
end
local kind, other = holders()
if not kind then
	return {-2, other}
end
local wrong = mismatch(mode, kind)
if wrong then
	return wrong
end
if redis.call("EXISTS", LINE) == 1 then
	handoff(nil) -- to the first in line, if it fits: maybe this token
	kind = holders()
end
local mine = holds(token, mode, kind)
if mine or (first and redis.call("EXISTS", LINE) == 0 and fits(mode, kind)) then
	local fence, err = given[token] or 0, nil -- a hand-off just now issued it one
	if fenced == "1" and fence == 0 then
		fence, err = issueFence(FENCE)
	end
	if not fence then
		if drop(token, mode, kind) then
			handoff(nil)
		end
		leave(token)
		return {-4, err}
	end
	if mine then
		extend(token, mode, ttl)
	else
		take(token, mode, ttl, ARGV[9])
	end
	leave(token)
	return {1, fence}
end
if keep > 0 then
	local problem = fenced == "1" and fenceProblem(FENCE)
	if problem then
		leave(token)
		return {-4, problem}
	end
	if not first and redis.call("HEXISTS", PLACES, token) == 0 then
		return {-1, blockedFor(mode, kind)}
	end
	place(token, keep, ttl, fenced, mode, ARGV[7], ARGV[8], ARGV[9])
end
return {0, blockedFor(mode, kind)}`)

// attemptArgs are the arguments of one acquireScript run.
type attemptArgs struct {
	key, token string
	holder     string // the holder's description, "" for none
	ttl        time.Duration
	fenced     bool
	mode       lockMode
	place      time.Duration // how long to keep a place; 0: a single attempt
	renew      bool          // renew the token's place, do not take one
	wake       wakeup        // how a hand-off to the place is announced
	plain      bool          // a single attempt at a plain lock: takeScript (see plain.go)
	places     string        // the lock's places key, for a plain attempt
	first      *firstAttempt // for a line's first attempt of the token, what is known of it
}

// A wakeup is how a hand-off to a place of a Locker is announced: on which
// channel, sharded (SPUBLISH) or not (PUBLISH).
type wakeup struct {
	channel string
	sharded bool
}

// pub is the wakeup as acquireScript takes it.
func (w wakeup) pub() string {
	if w.sharded {
		return "s"
	}
	return "p"
}

// attemptResult is the outcome of an acquireScript run.
type attemptResult struct {
	ours     bool
	fence    int64         // when ours
	pttl     time.Duration // when not ours: blockedFor's (< 0: see blockedFor)
	noPlace  bool          // a renewal found no place, or the token is spent: it must not be used again
	notPlain bool          // a plain attempt found the key not plain: acquireScript decides
	resent   bool          // go-redis sent the attempt more than once (see counted)
	unsent   bool          // go-redis never sent it: it cannot run
}

// call returns the acquireScript run of a (takeScript's, for a plain
// attempt).
func (a attemptArgs) call(ks keyspace) scriptCall {
	rkey := ks.lock(a.key)
	token := &counted{s: a.token}
	if a.plain {
		return scriptCall{takeScript, []string{rkey, a.places}, []any{token, a.ttl.Milliseconds()}}
	}
	return scriptCall{acquireScript, ks.familyKeys(rkey, a.key, a.token), []any{token,
		a.ttl.Milliseconds(), flag(a.fenced), a.place.Milliseconds(), flag(!a.renew), a.mode.arg(), a.wake.pub(), a.wake.channel, a.holder}}
}

// runAttempt runs acquireScript.
func runAttempt(ctx context.Context, c redis.Scripter, ks keyspace, a attemptArgs) (attemptResult, error) {
	cmd, n := a.call(ks).run(ctx, c)
	res, err := parseAttempt(a, cmd)
	res.resent, res.unsent = n.resent(), n.unsent()
	return res, err
}

// parseAttempt reads the reply to the acquireScript (takeScript) run of a.
func parseAttempt(a attemptArgs, cmd *redis.Cmd) (attemptResult, error) {
	res, err := cmd.Slice()
	if err != nil {
		return attemptResult{}, err
	}
	code, ok := replyInt(res, 0)
	if a.plain && ok && len(res) == 1 {
		return attemptResult{ours: code == 1, notPlain: code == -1}, nil
	}
	if !ok || len(res) != 2 {
		return attemptResult{}, fmt.Errorf("unexpected reply %v", res)
	}
	v, _ := replyInt(res, 1)
	switch code {
	case 1:
		return attemptResult{ours: true, fence: v}, nil
	case 0, -1:
		return attemptResult{pttl: time.Duration(v) * time.Millisecond, noPlace: code == -1}, nil
	case -2:
		return attemptResult{}, refusal{wrongKind(fmt.Sprint(res[1]), a.mode)}
	case -3:
		return attemptResult{}, refusal{fmt.Errorf("%w: WithPermits(%d): the key is a semaphore of %d permits; every acquisition of a key must name the same number", ErrInvalidOption, a.mode.permits, v)}
	}
	return attemptResult{}, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, res[1])}
}

// replyInt returns the integer at res[i].
func replyInt(res []any, i int) (int64, bool) {
	if i >= len(res) {
		return 0, false
	}
	v, ok := res[i].(int64)
	return v, ok
}

// releaseScript ends a hold or leaves the line, and hands the key to the
// first in line while it fits.
//
//	KEYS    familyKeys(key, token)
//	ARGV[1] token to release, or to take out of line
//	ARGV[2] the mode ARGV[1] holds the key in
//	ARGV[3] another token to take out of line (the place of a line of the
//	        caller's Locker that nobody waits in any more), or ""
//	ARGV[4] > 0 to mark ARGV[1] spent for that many ms (see spendLua), "0"
//	        not to
//	ARGV[5] the caller's wake channel: hand-offs to it are returned, not
//	        announced
//	returns {held, handoffs, token, fence, lease, token, fence, lease, ...}:
//	        held is 1 when ARGV[1] held the key and no longer does, else 0
//	        (the key was untouched, and ARGV[1] is no longer in line);
//	        handoffs is how many places in line got the key; then the
//	        hand-offs to places on the caller's channel.
var releaseScript = redis.NewScript(familyLua + spendLua + `
local token, mode = ARGV[1], ARGV[2]
local held = drop(token, mode, holders())
if not held then
	leave(token)
end
if ARGV[3] ~= "" then
	leave(ARGV[3])
end
local own, n = handoff(ARGV[5])
if tonumber(ARGV[4]) > 0 then
	spend(ARGV[4])
end
local reply = {0, n}
if held then
	reply[1] = 1
end
for _, v in ipairs(own) do
	reply[#reply + 1] = v
end
return reply`)

// releaseArgs are the arguments of one releaseScript run.
type releaseArgs struct {
	key, token string
	mode       lockMode
	leave      string        // a place to take out of line too, or ""
	spend      time.Duration // mark token spent for that long; 0: no mark
	wake       string        // the caller's wake channel
}

// releaseResult is the outcome of a releaseScript run.
type releaseResult struct {
	released bool
	handoffs int       // places in line that got the key
	handed   []handoff // hand-offs to places of the caller's Locker
	resent   bool      // go-redis sent the release more than once (see counted)
}

// handoff is a hand-off of the key to a token (a line's): fence is its
// fence, 0 for none, -1 when it could not be issued (the place was dropped);
// lease is the lease it asked for (see line.go for what it got).
type handoff struct {
	token string
	fence int64
	lease time.Duration
}

// runRelease runs releaseScript.
func runRelease(ctx context.Context, c redis.Scripter, ks keyspace, a releaseArgs) (releaseResult, error) {
	rkey := ks.lock(a.key)
	s := scriptCall{releaseScript, ks.familyKeys(rkey, a.key, a.token),
		[]any{&counted{s: a.token}, a.mode.arg(), a.leave, a.spend.Milliseconds(), a.wake}}
	cmd, sent := s.run(ctx, c)
	res, err := cmd.Slice()
	if err != nil {
		return releaseResult{resent: sent.resent()}, err
	}
	if len(res) < 2 || len(res)%3 != 2 {
		return releaseResult{resent: sent.resent()}, fmt.Errorf("unexpected reply %v", res)
	}
	held, _ := replyInt(res, 0)
	n, _ := replyInt(res, 1)
	r := releaseResult{released: held == 1, handoffs: int(n), resent: sent.resent()}
	for i := 2; i < len(res); i += 3 {
		token, _ := res[i].(string)
		fence, _ := replyInt(res, i+1)
		lease, _ := replyInt(res, i+2)
		r.handed = append(r.handed, handoff{token: token, fence: fence, lease: time.Duration(lease) * time.Millisecond})
	}
	return r, nil
}

// holderRefreshScript sets the lease of a shared holder or permit if it is
// still held, and issues it a fence when asked.
//
//	KEYS    familyKeys(key, "")
//	ARGV[1] token
//	ARGV[2] new ttl in ms (>= 1)
//	ARGV[3] the command's generation (see leaseClock)
//	ARGV[4] "1" to issue a new fence, "0" not to
//	ARGV[5] the mode: "s" or a number of permits
//	returns what renewScript returns.
var holderRefreshScript = redis.NewScript(familyLua + genLua + `
local token, mode = ARGV[1], ARGV[5]
if not holds(token, mode, holders()) then
	return {0, 0}
end
if not newerGen(GENS, token, ARGV[3], ARGV[2]) then
	return {2, 0}
end
local fence, err = 0, nil
if ARGV[4] == "1" then
	fence, err = issueFence(FENCE)
	if not fence then
		return {-4, err}
	end
end
redis.call("ZADD", K, now + ARGV[2], token)
setExpiry()
return {1, fence}`)

// refreshArgs are the arguments of a refresh: a renewal of token's lease
// in mode to ttl, of generation gen, issuing a fence when fenced.
type refreshArgs struct {
	key, token string
	mode       lockMode
	ttl        time.Duration
	gen        int64
	fenced     bool
	described  bool // the holder has a description (WithHolder)
}

// call returns the script run of a: renewScript for an exclusive holder,
// holderRefreshScript for others.
func (a refreshArgs) call(ks keyspace) scriptCall {
	rkey := ks.lock(a.key)
	if !a.mode.exclusive() {
		return scriptCall{holderRefreshScript, ks.familyKeys(rkey, a.key, ""),
			[]any{a.token, a.ttl.Milliseconds(), a.gen, flag(a.fenced), a.mode.arg()}}
	}
	keys := []string{rkey, ks.side(rkey, a.key, gensKind)}
	if a.fenced {
		keys = append(keys, ks.fence(rkey))
	}
	if a.described {
		keys = append(keys, ks.side(rkey, a.key, holdersKind))
	}
	return scriptCall{renewScript, keys, []any{a.token, a.ttl.Milliseconds(), a.gen, flag(a.fenced), flag(a.described)}}
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
	res, err := cmd.Slice()
	if err != nil {
		return refreshResult{}, err
	}
	code, ok := replyInt(res, 0)
	if !ok || len(res) != 2 {
		return refreshResult{}, fmt.Errorf("unexpected reply %v", res)
	}
	if code == -4 {
		return refreshResult{}, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, res[1])}
	}
	fence, _ := replyInt(res, 1)
	return refreshResult{held: code > 0, set: code == 1, fence: fence}, nil
}

// runRefresh runs renewScript (or holderRefreshScript).
func runRefresh(ctx context.Context, c redis.Scripter, ks keyspace, a refreshArgs) (refreshResult, error) {
	cmd, _ := a.call(ks).run(ctx, c)
	return parseRefresh(cmd)
}

// holderPTTLScript reports the lease left of a shared holder or permit.
//
//	KEYS[1] the lock key
//	ARGV[1] token
//	returns the lease left in ms (>= 0) when the token holds the key, -2
//	        when it does not.
var holderPTTLScript = redis.NewScript(`
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local lease = redis.pcall("ZSCORE", KEYS[1], ARGV[1])
if type(lease) == "string" and tonumber(lease) >= now then
	return tonumber(lease) - now
end
return -2`)

// runPTTL runs pttlScript (or holderPTTLScript).
func runPTTL(ctx context.Context, c redis.Scripter, rkey, token string, m lockMode) (time.Duration, error) {
	s := scriptCall{pttlScript, []string{rkey}, []any{token}}
	if !m.exclusive() {
		s.script = holderPTTLScript
	}
	cmd, _ := s.run(ctx, c)
	ms, err := cmd.Int64()
	return time.Duration(ms) * time.Millisecond, err
}

// inspectScript reads who holds a lock key, and how many wait for it. It
// writes nothing.
//
//	KEYS    familyKeys(key, "")
//	returns {what, permits, fence, waiting, token, ttl, desc, ...}: what
//	        K holds ("" nothing, "x", "s", "p" for a semaphore, "?" for a
//	        string this layout did not write, else "layout<n>" or a Redis
//	        type); permits, a semaphore's number of permits (0 for other
//	        modes); fence, the key's fence counter as stored ("" if none);
//	        waiting, the live places in line; then each holder's token
//	        (for "?" the key's value), lease left (ms; -1 without expiry)
//	        and description ("" if none).
var inspectScript = redis.NewScript(familyLua + `
local kind, other = holders()
local what, permits, held = kind or other, 0, {}
if kind == "x" or kind == "?" then
	local token = redis.call("GET", K)
	held = {token, redis.call("PTTL", K), redis.call("HGET", HOLDERS, token) or ""}
elseif kind and kind ~= "" then
	if kind ~= "s" then
		what, permits = "p", tonumber(kind)
	end
	local rs = redis.call("ZRANGEBYSCORE", K, now, "+inf", "WITHSCORES")
	for i = 1, #rs, 2 do
		held[#held + 1] = rs[i]
		held[#held + 1] = tonumber(rs[i + 1]) - now
		held[#held + 1] = redis.call("HGET", HOLDERS, rs[i]) or ""
	end
end
local waiting = 0
for _, token in ipairs(redis.call("LRANGE", LINE, 0, -1)) do
	local value = redis.call("HGET", PLACES, token)
	if value and tonumber(string.match(value, PLACE) or "0") >= now then
		waiting = waiting + 1
	end
end
local reply = {what, permits, redis.call("GET", FENCE) or "", waiting}
for _, v in ipairs(held) do
	reply[#reply + 1] = v
end
return reply`)

// runInspect runs inspectScript.
func runInspect(ctx context.Context, c redis.Scripter, ks keyspace, key string) (Info, error) {
	cmd, _ := scriptCall{inspectScript, ks.familyKeys(ks.lock(key), key, ""), nil}.run(ctx, c)
	res, err := cmd.Slice()
	if err != nil {
		return Info{}, err
	}
	if len(res) < 4 || len(res)%3 != 1 {
		return Info{}, fmt.Errorf("unexpected reply %v", res)
	}
	what, _ := res[0].(string)
	permits, _ := replyInt(res, 1)
	fence, _ := res[2].(string)
	waiting, _ := replyInt(res, 3)
	info := Info{Key: key, Mode: infoMode(what), Permits: int(permits), Waiting: int(waiting)}
	info.Fence, _ = strconv.ParseInt(fence, 10, 64)
	for i := 4; i < len(res); i += 3 {
		token, _ := res[i].(string)
		ms, _ := replyInt(res, i+1)
		desc, _ := res[i+2].(string)
		info.Holders = append(info.Holders, Holder{Token: token, Description: desc, TTL: time.Duration(ms) * time.Millisecond})
	}
	return info, nil
}

// infoMode is the Mode of what inspectScript found.
func infoMode(what string) Mode {
	switch what {
	case "":
		return ModeFree
	case "x":
		return ModeExclusive
	case "s":
		return ModeShared
	case "p":
		return ModeSemaphore
	case "?":
		return ModeForeign
	}
	return ModeOther
}

// fenceStepScript is a step of a quorum Locker's fence (see quorum.fence):
// it increments the fence counter, or raises it to a value. Like every
// script that issues fences (see fenceLua), it keeps the counter within
// 2^53-1, where Lua's numbers are exact, and refuses a counter that is not
// a non-negative integer below that.
//
//	KEYS[1] the fence counter
//	ARGV[1] "0" to increment the counter, or a value to raise it to
//	returns {1, value}: the counter's value after the step (a raise that
//	        finds the counter at the value or above returns it as it is, a
//	        string); {-4, why} when the counter holds something else than a
//	        non-negative integer, when an increment finds it at 2^53-1 or
//	        beyond, or when ARGV[1] is beyond 2^53-1: nothing changed.
var fenceStepScript = redis.NewScript(fenceLua + `
if ARGV[1] == "0" then
	local fence, err = issueFence(KEYS[1])
	if not fence then
		return {-4, err}
	end
	return {1, fence}
end
local to = tonumber(ARGV[1])
if to > ` + maxFenceLua + ` then
	return {-4, "a fence counter cannot be raised beyond 2^53-1 (the largest integer Lua holds exactly)"}
end
local problem = fenceProblem(KEYS[1])
if problem and not string.find(problem, "maximum", 1, true) then
	return {-4, problem}
end
local v = redis.call("GET", KEYS[1])
if v and tonumber(v) >= to then
	return {1, v} -- at least to already (exactly, as a string, however large)
end
redis.call("SET", KEYS[1], ARGV[1])
return {1, to}`)

// runFenceStep runs fenceStepScript on the fence counter of the lock on
// key: to is 0 to increment it, or the value to raise it to.
func runFenceStep(ctx context.Context, c redis.Scripter, ks keyspace, key string, to int64) (int64, error) {
	cmd, _ := scriptCall{fenceStepScript, []string{ks.fence(ks.lock(key))}, []any{to}}.run(ctx, c)
	res, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	code, _ := replyInt(res, 0)
	if code != 1 || len(res) != 2 {
		return 0, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, res[len(res)-1])}
	}
	switch v := res[1].(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply %v", res)
}

// errFenceNotIssued is the error of an acquisition whose fence could not be
// issued: the fence counter holds something else than an integer, or is at
// its maximum. Nothing is held.
var errFenceNotIssued = errors.New("the fence could not be issued")

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
//	        {-2, what} when the key holds something else than such a hash:
//	        what is its Redis type, or "hash" for a hash whose fence field
//	        is not a non-negative integer; nothing changed.
var fencedSetScript = redis.NewScript(`
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "hash" and kind ~= "none" then
	return {-2, kind}
end
local seen = redis.call("HGET", KEYS[1], "fence") or "0"
if not string.match(seen, "^%d+$") then
	return {-2, "hash"}
end
seen = tonumber(seen)
if tonumber(ARGV[2]) < seen then
	return {0, seen}
end
redis.call("HSET", KEYS[1], "value", ARGV[1], "fence", ARGV[2])
return {1, seen}`)

// runFencedSet runs fencedSetScript: ok reports whether the value was
// written; seen is the resource's fence before the call. A key that holds
// something else is ErrWrongKind.
func runFencedSet(ctx context.Context, c redis.Scripter, key, value string, fence int64) (ok bool, seen int64, err error) {
	cmd, _ := scriptCall{fencedSetScript, []string{key}, []any{value, fence}}.exec(ctx, c)
	res, err := cmd.Slice()
	if err != nil {
		return false, 0, err
	}
	code, _ := replyInt(res, 0)
	if len(res) != 2 {
		return false, 0, errors.New("unexpected reply to the fenced write")
	}
	if code == -2 {
		what := fmt.Sprint(res[1])
		if what == "hash" {
			what = "a hash whose fence field is not a non-negative integer"
		} else {
			what = "a Redis " + what
		}
		return false, 0, refusal{fmt.Errorf("%w: it holds %s, not a resource SetFenced writes (a hash with the fields value and fence); nothing was written", ErrWrongKind, what)}
	}
	seen, _ = replyInt(res, 1)
	return code == 1, seen, nil
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
