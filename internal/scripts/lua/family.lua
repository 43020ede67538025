-- family.lua (a part): the data of a lock key and its holders, for the
-- scripts of the line and the lock family (read-write locks, semaphores).
-- The data is described in one table at the top of scripts.go.
--
-- KEYS (built by familyKeys in Go): for each lock key six, the lock key,
-- its line, places, gens and holders hashes, and its slot's fence counter;
-- then, for the scripts that take or release, the spent mark of their
-- token. A script on one key has seven; a set's (ObtainMulti) six per key
-- and one. The helpers below take one lock key's keys, k (see locks).
--
-- Scripts may call TIME since Redis 5 (they are replicated by their
-- effects). Every script issues a fence before it sets the key, so that a
-- fence that cannot be issued leaves no lock.

local locks = {} -- each lock key's keys: K, LINE, PLACES, GENS, HOLDERS, FENCE
for i = 1, #KEYS - 5, 6 do
	locks[#locks + 1] = {K = KEYS[i], LINE = KEYS[i + 1], PLACES = KEYS[i + 2], GENS = KEYS[i + 3], HOLDERS = KEYS[i + 4], FENCE = KEYS[i + 5]}
end
local SPENT = KEYS[#locks * 6 + 1] -- the token's spent mark, when KEYS has one
local clockMs
-- now is Redis's clock, in ms, read once per run when first needed
local function now()
	if not clockMs then
		local t = redis.call("TIME")
		clockMs = t[1] * 1000 + math.floor(t[2] / 1000)
	end
	return clockMs
end
local SHARED_MARK, PERMITS_MARK = LAYOUT .. ":shared", LAYOUT .. ":permits:"

-- appends the values to the list t (values that are not nil)
local function append(t, ...)
	for _, v in ipairs({...}) do
		t[#t + 1] = v
	end
end

-- sets the expiry of key name to ms from now, unless it ends later already
local function lengthen(name, ms)
	local left = redis.call("PTTL", name)
	if left == -1 or (left >= 0 and left < tonumber(ms)) then
		redis.call("PEXPIRE", name, ms)
	end
end

-- what k.K holds, as this layout wrote it: "" (nothing), EXCLUSIVE (an
-- exclusive holder), SHARED (shared holders), or a semaphore's number of
-- permits; for a string this layout did not write, FOREIGN: another owner's
-- lock, waited for like any other holder, never changed; for anything else
-- this layout did not write, nil and what it is ("layout<n>" for the data
-- of layout rl<n>, else its Redis type). It is read once per run: k.held
-- remembers it (and k.value a string's value) until the run changes K (see
-- forget).
local function kindOf(k)
	if k.held then
		return k.held
	end
	local v = redis.pcall("GET", k.K)
	if not v then
		k.held = ""
		return ""
	end
	local t, mark = "string", v
	if type(v) == "table" then -- another type than a string
		t, mark = redis.call("TYPE", k.K).ok, nil
	end
	if t == "string" and string.sub(mark, 1, #TOKEN_PREFIX) == TOKEN_PREFIX then
		k.held, k.value = EXCLUSIVE, mark
		return EXCLUSIVE
	elseif t == "zset" then
		local first = redis.call("ZRANGE", k.K, 0, 0, "WITHSCORES")
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
		k.held, k.value = FOREIGN, mark
		return FOREIGN
	end
	return nil, t
end

-- forget makes kindOf read k.K again, after the run changed it; or records
-- what it holds now, when the run knows (held, and value for a string)
local function forget(k, held, value)
	k.held, k.value = held, value
end

-- makes the holders k.K (a sorted set) expire with their last lease; K goes
-- when nobody holds it any more (each holder's description goes with it:
-- see drop and prune; the holders hash itself is never deleted as a whole,
-- nor given an expiry shorter than its descriptions')
local function setExpiry(k)
	forget(k)
	local last = redis.call("ZRANGE", k.K, -1, -1, "WITHSCORES")
	if last[2] and tonumber(last[2]) > 0 then
		redis.call("PEXPIREAT", k.K, last[2])
	else
		redis.call("DEL", k.K)
	end
end

-- removes the holders of k.K (a sorted set) whose lease ended. A lease that
-- ends at e (ms, Redis clock, cut to the millisecond) lasts while now <= e:
-- a holder set at E for ttl (e = floor(E) + ttl) keeps its share until at
-- least E + ttl, as a key with PX ttl does, and K expires with it (Redis
-- expires a key at PEXPIREAT e once its clock is past e).
local function prune(k)
	local lapsed = redis.call("ZRANGEBYSCORE", k.K, "(0", "(" .. now())
	if #lapsed > 0 then
		redis.call("ZREMRANGEBYSCORE", k.K, "(0", "(" .. now())
		redis.pcall("HDEL", k.HOLDERS, unpack(lapsed))
		redis.pcall("HDEL", k.GENS, unpack(lapsed))
		setExpiry(k)
	end
end

-- whether a holder of mode could take k.K, which holds kind, now
local function fits(k, mode, kind)
	if kind == "" then
		return true
	elseif mode == EXCLUSIVE or kind ~= mode then
		return false
	elseif mode == SHARED then
		return true
	end
	prune(k)
	return redis.call("ZCARD", k.K) <= tonumber(mode) -- the mode's mark and fewer than n holders
end

-- whether token holds k.K, which holds kind, in mode
local function isHolder(k, token, mode, kind)
	if kind ~= mode then
		return false
	elseif mode == EXCLUSIVE then
		return k.value == token
	end
	local lease = redis.call("ZSCORE", k.K, token)
	return lease and tonumber(lease) >= now()
end

-- makes token hold k.K in mode for ms from now; desc ("": none) describes
-- the holder
local function take(k, token, mode, ms, desc)
	if mode == EXCLUSIVE then
		redis.call("SET", k.K, token, "PX", ms)
		forget(k, EXCLUSIVE, token)
	else
		forget(k)
		if redis.call("EXISTS", k.K) == 0 then
			local mark = SHARED_MARK
			if mode ~= SHARED then
				mark = PERMITS_MARK .. mode
			end
			redis.call("ZADD", k.K, 0, mark)
		end
		redis.call("ZADD", k.K, now() + ms, token)
		lengthen(k.K, ms)
	end
	if desc ~= "" then
		redis.call("HSET", k.HOLDERS, token, desc)
		lengthen(k.HOLDERS, ms)
	end
end

-- lengthens the lease of token, which holds k.K in mode, to ms from now,
-- unless it ends later already: a late copy of an attempt (go-redis sent it
-- again, and the first copy ran after) never shortens a lease that a
-- Refresh or a hand-off set since (see leaseClock in Go)
local function lengthenHold(k, token, mode, ms)
	if mode == EXCLUSIVE then
		lengthen(k.K, ms)
	else
		redis.call("ZADD", k.K, "GT", now() + ms, token)
		lengthen(k.K, ms)
	end
	if redis.pcall("HEXISTS", k.HOLDERS, token) == 1 then
		lengthen(k.HOLDERS, ms)
	end
end

-- ends token's hold of k.K, which holds kind, in mode; returns whether it
-- held it. clean names the side keys the holder may have written (see
-- release.lua): "g" generations, "h" a description, "f" a hand-off's fence
local function drop(k, token, mode, kind, clean)
	local held = false
	if kind == mode and mode == EXCLUSIVE then
		if k.value == token then
			redis.call("DEL", k.K)
			forget(k, "")
			held = true
		end
	elseif kind == mode then
		prune(k)
		if redis.call("ZREM", k.K, token) == 1 then
			setExpiry(k)
			held = true
		end
	end
	clean = clean or "ghf"
	if held then -- side keys another client broke do not undo the release
		if string.find(clean, "g", 1, true) then
			redis.pcall("HDEL", k.GENS, token)
		end
		if string.find(clean, "h", 1, true) then
			redis.pcall("HDEL", k.HOLDERS, token)
		end
		if string.find(clean, "f", 1, true) then
			redis.pcall("HDEL", k.PLACES, HANDED_FIELD .. token)
		end
	end
	return held
end
