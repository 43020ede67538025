-- line.lua (a part, after family.lua): a lock key's line of places, and
-- the hand-off that gives the key to the first of them.
--
-- A place is the field of its token in the places hash, whose value is
-- "deadline ttl fenced mode pub channel desc" (see scripts.go's table), and
-- its token in the line list, first in line first. The place of a set
-- (ObtainMulti) is in the line of each of its keys, put there by one script
-- run, so that the places of sets are in the same order in every line: it
-- is handed each key as a one-key place is, when it is first in that key's
-- line, and holds what it was handed, within its place's deadline, until it
-- has them all (see acquire.lua).

local PLACE = "^(%d+) (%d+) ([01]) (%w+) ([" .. PUB .. SPUB .. "]) (%S+) (.*)$"
local given = {} -- token .. " " .. key -> the fence a hand-off of this run gave it (0: none)

-- how long until a holder that keeps mode from fitting k.K, which holds
-- kind, may end (ms): NO_EXPIRY when it has no expiry (a string this layout
-- did not write: it will not end by itself), ONLY_LINE when no holder is in
-- the way (only the line is)
local function blockedFor(k, mode, kind)
	if kind == EXCLUSIVE or kind == FOREIGN then
		return redis.call("PTTL", k.K)
	elseif kind == "" or (mode == SHARED and kind == SHARED) then
		return ONLY_LINE
	end
	local first = redis.call("ZRANGEBYSCORE", k.K, "(0", "+inf", "WITHSCORES", "LIMIT", 0, 1)
	if first[2] then
		return math.max(tonumber(first[2]) - now(), 0)
	end
	return ONLY_LINE
end

-- the mode of the first live place in k's line, or nil
local function lineMode(k)
	for i = 0, math.huge do
		local token = redis.call("LINDEX", k.LINE, i)
		if not token then
			return nil
		end
		local deadline, mode, _
		local value = redis.call("HGET", k.PLACES, token)
		if value then
			deadline, _, _, mode = string.match(value, PLACE)
		end
		if deadline and tonumber(deadline) >= now() then
			return mode
		end
	end
end

-- why a holder of mode can never take k.K, which holds kind: {WRONG_KIND,
-- what it holds} for another kind of lock or data, {OTHER_PERMITS, n} for
-- a semaphore of another n; nil when it can (once the holders in its way
-- are gone)
local function mismatch(k, mode, kind)
	local have = kind
	if kind == "" then
		have = lineMode(k)
		if not have then
			return nil
		end
	end
	local lock = {[EXCLUSIVE] = true, [SHARED] = true, [FOREIGN] = true}
	if lock[mode] and lock[have] then
		return nil
	elseif lock[mode] then
		return {WRONG_KIND, "permits:" .. have}
	elseif have == FOREIGN then
		return {WRONG_KIND, "string"}
	elseif lock[have] then
		return {WRONG_KIND, have}
	elseif have ~= mode then
		return {OTHER_PERMITS, tonumber(have)}
	end
	return nil
end

-- keeps a place in k's line for token for keep ms
local function place(k, token, keep, ttl, fenced, mode, pub, channel, desc)
	local value = (now() + keep) .. " " .. ttl .. " " .. fenced .. " " .. mode .. " " .. pub .. " " .. channel .. " " .. desc
	if redis.call("HSET", k.PLACES, token, value) == 1 then
		redis.call("RPUSH", k.LINE, token)
	end
	lengthen(k.LINE, 2 * keep)
	lengthen(k.PLACES, 2 * keep)
end

-- takes token's place out of k's line, if it has one
local function withdraw(k, token)
	if redis.call("HDEL", k.PLACES, token) == 1 then
		redis.call("LREM", k.LINE, 1, token)
	end
end

-- announces to a place, on its channel, "<fence> <lease> <token> <key>"
local function announce(k, pub, channel, fence, ttl, token)
	local cmd = "PUBLISH"
	if pub == SPUB then
		cmd = "SPUBLISH"
	end
	redis.call(cmd, channel, fence .. " " .. ttl .. " " .. token .. " " .. k.K)
end

-- Hands k.K to the first place in line while it fits: one exclusive
-- holder, or shared holders up to the next exclusive one, or permits while
-- some are free. Each gets its lease, but not beyond its place's deadline.
-- Lapsed places (their waiter stopped renewing them) are dropped on the
-- way, and so is a place whose fence cannot be issued (told with fence -1).
-- An exclusive holder stops the hand-offs: nothing fits after it. Each
-- hand-off is announced on the place's channel, except those on the channel
-- mine (when not nil): those are returned instead, as a flat list token,
-- fence, lease. The second result is the number of hand-offs.
local function handOff(k, mine)
	local own, n = {}, 0
	while true do
		local token = redis.call("LINDEX", k.LINE, 0)
		if not token then
			return own, n
		end
		local value = redis.call("HGET", k.PLACES, token)
		local deadline, ttl, fenced, mode, pub, channel, desc
		if value then
			deadline, ttl, fenced, mode, pub, channel, desc = string.match(value, PLACE)
		end
		local live = deadline and tonumber(deadline) >= now()
		if live and not fits(k, mode, kindOf(k)) then
			return own, n
		end
		redis.call("LPOP", k.LINE)
		redis.call("HDEL", k.PLACES, token)
		if live then
			local fence = 0
			if fenced == "1" then
				fence = issueFence(k.FENCE) or -1
			end
			if fence >= 0 then
				local lease = math.min(tonumber(ttl), tonumber(deadline) - now() + 1)
				take(k, token, mode, lease, desc)
				given[token .. " " .. k.K] = fence
				n = n + 1
				if fence > 0 then -- for an attempt of token that crossed this hand-off
					redis.call("HSET", k.PLACES, HANDED_FIELD .. token, fence)
					lengthen(k.PLACES, lease)
				end
			end
			if fence >= 0 and channel == mine then
				append(own, token, fence, tonumber(ttl))
			else
				announce(k, pub, channel, fence, ttl, token)
			end
			if fence >= 0 and mode == EXCLUSIVE then
				return own, n -- nothing fits after it
			end
		end
	end
end
