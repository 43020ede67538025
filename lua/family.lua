-- family.lua (a part): the data of a lock key and its holders, for the
-- scripts of the line and the lock family (read-write locks, semaphores).
-- The data is described in one table at the top of scripts.go.
--
-- KEYS (built by familyKeys in Go): the lock key, its line, places, gens
-- and holders hashes, its slot's fence counter and, for the scripts that
-- take or release, the spent mark of their token.
--
-- Scripts may call TIME since Redis 5 (they are replicated by their
-- effects). Every script issues a fence before it sets the key, so that a
-- fence that cannot be issued leaves no lock.

local K, LINE, PLACES, GENS, HOLDERS, FENCE, SPENT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000) -- ms, Redis's clock
local SHARED_MARK, PERMITS_MARK = LAYOUT .. ":shared", LAYOUT .. ":permits:"

-- sets the expiry of key k to ms from now, unless it ends later already
local function lengthen(k, ms)
	local left = redis.call("PTTL", k)
	if left == -1 or (left >= 0 and left < tonumber(ms)) then
		redis.call("PEXPIRE", k, ms)
	end
end

-- what K holds, as this layout wrote it: "" (nothing), EXCLUSIVE (an
-- exclusive holder), SHARED (shared holders), or a semaphore's number of
-- permits; for a string this layout did not write, FOREIGN: another owner's
-- lock, waited for like any other holder, never changed; for anything else
-- this layout did not write, nil and what it is ("layout<n>" for the data
-- of layout rl<n>, else its Redis type)
local function kindOf()
	local t = redis.call("TYPE", K).ok
	if t == "none" then
		return ""
	end
	local mark
	if t == "string" then
		mark = redis.call("GET", K)
		if string.sub(mark, 1, #TOKEN_PREFIX) == TOKEN_PREFIX then
			return EXCLUSIVE
		end
	elseif t == "zset" then
		local first = redis.call("ZRANGE", K, 0, 0, "WITHSCORES")
		if first[2] == "0" then
			mark = first[1]
			if mark == SHARED_MARK then
				return SHARED
			end
			local n = string.match(mark, "^" .. PERMITS_MARK .. "(%d+)$")
			if n then
				return n
			end
		end
	end
	local other = mark and string.match(mark, "^rl(%d+):")
	if other and "rl" .. other ~= LAYOUT then -- (an unknown mark of this layout is not ours)
		return nil, "layout" .. other
	elseif t == "string" then
		return FOREIGN
	end
	return nil, t
end

-- makes the holders K (a sorted set) expire with their last lease; K goes
-- when nobody holds it any more (each holder's description goes with it:
-- see drop and prune; the holders hash itself is never deleted as a whole,
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
	elseif mode == EXCLUSIVE or kind ~= mode then
		return false
	elseif mode == SHARED then
		return true
	end
	prune()
	return redis.call("ZCARD", K) <= tonumber(mode) -- the mode's mark and fewer than n holders
end

-- whether token holds K, which holds kind, in mode
local function isHolder(token, mode, kind)
	if kind ~= mode then
		return false
	elseif mode == EXCLUSIVE then
		return redis.call("GET", K) == token
	end
	local lease = redis.call("ZSCORE", K, token)
	return lease and tonumber(lease) >= now
end

-- makes token hold K in mode for ms from now; desc ("": none) describes
-- the holder
local function take(token, mode, ms, desc)
	if mode == EXCLUSIVE then
		redis.call("SET", K, token, "PX", ms)
	else
		if redis.call("EXISTS", K) == 0 then
			local mark = SHARED_MARK
			if mode ~= SHARED then
				mark = PERMITS_MARK .. mode
			end
			redis.call("ZADD", K, 0, mark)
		end
		redis.call("ZADD", K, now + ms, token)
		lengthen(K, ms)
	end
	if desc ~= "" then
		redis.call("HSET", HOLDERS, token, desc)
		lengthen(HOLDERS, ms)
	end
end

-- lengthens the lease of token, which holds K in mode, to ms from now,
-- unless it ends later already: a late copy of an attempt (go-redis sent it
-- again, and the first copy ran after) never shortens a lease that a
-- Refresh or a hand-off set since (see leaseClock in Go)
local function lengthenHold(token, mode, ms)
	if mode == EXCLUSIVE then
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
	if kind == mode and mode == EXCLUSIVE then
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
		redis.pcall("HDEL", PLACES, HANDED_FIELD .. token)
	end
	return held
end
