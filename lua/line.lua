-- line.lua (a part, after family.lua): the key's line of places, and the
-- hand-off that gives the key to the first of them.
--
-- A place is the field of its token in the places hash, whose value is
-- "deadline ttl fenced mode pub channel desc" (see scripts.go's table), and
-- its token in the line list, first in line first.

local PLACE = "^(%d+) (%d+) ([01]) (%w+) ([" .. PUB .. SPUB .. "]) (%S+) (.*)$"
local given = {} -- token -> the fence a hand-off of this run gave it (0: none)

-- how long until a holder that keeps mode from fitting K, which holds kind,
-- may end (ms): NO_EXPIRY when it has no expiry (a string this layout did
-- not write: it will not end by itself), ONLY_LINE when no holder is in the
-- way (only the line is)
local function blockedFor(mode, kind)
	if kind == EXCLUSIVE or kind == FOREIGN then
		return redis.call("PTTL", K)
	elseif kind == "" or (mode == SHARED and kind == SHARED) then
		return ONLY_LINE
	end
	local first = redis.call("ZRANGEBYSCORE", K, "(0", "+inf", "WITHSCORES", "LIMIT", 0, 1)
	if first[2] then
		return math.max(tonumber(first[2]) - now, 0)
	end
	return ONLY_LINE
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

-- why a holder of mode can never take K, which holds kind: {WRONG_KIND,
-- what K holds} for another kind of lock or data, {OTHER_PERMITS, n} for a
-- semaphore of another n; nil when it can (once the holders in its way are
-- gone)
local function mismatch(mode, kind)
	local have = kind
	if kind == "" then
		have = lineMode()
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
local function withdraw(token)
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
local function handOff(mine)
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
		if live and not fits(mode, kindOf()) then
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
				local lease = math.min(tonumber(ttl), tonumber(deadline) - now + 1)
				take(token, mode, lease, desc)
				given[token] = fence
				n = n + 1
				if fence > 0 then -- for an attempt of token that crossed this hand-off
					redis.call("HSET", PLACES, HANDED_FIELD .. token, fence)
					lengthen(PLACES, lease)
				end
			end
			if fence >= 0 and channel == mine then
				own[#own + 1] = token
				own[#own + 1] = fence
				own[#own + 1] = tonumber(ttl)
			else
				local cmd = "PUBLISH"
				if pub == SPUB then
					cmd = "SPUBLISH"
				end
				redis.call(cmd, channel, fence .. " " .. ttl .. " " .. token .. " " .. K)
			end
		end
	end
end
