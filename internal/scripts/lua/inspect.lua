-- inspect: who holds a lock key, and how many wait for it. It writes
-- nothing.
-- parts: fence family line
--
-- KEYS    familyKeys(key, ""): the lock key, line, places, gens, holders,
--         fence counter
-- returns {what, permits, fence, waiting, token, ttl, desc, ...}: what K
--         holds ("" nothing, EXCLUSIVE, SHARED, SEMAPHORE, FOREIGN for a
--         string this layout did not write, else "layout<n>" or a Redis
--         type); permits, a semaphore's number of permits (0 for other
--         modes); fence, the key's fence counter as stored ("" if none);
--         waiting, the live places in line; then each holder's token (for
--         FOREIGN the key's value), lease left (ms; NO_EXPIRY without
--         expiry) and description ("" if none).

local k = locks[1]
local kind, other = kindOf(k)
local what, permits, held = kind or other, 0, {}
if kind == EXCLUSIVE or kind == FOREIGN then
	local token = k.value
	held = {token, redis.call("PTTL", k.K), redis.call("HGET", k.HOLDERS, token) or ""}
elseif kind and kind ~= "" then
	if kind ~= SHARED then
		what, permits = SEMAPHORE, tonumber(kind)
	end
	local rs = redis.call("ZRANGEBYSCORE", k.K, now(), "+inf", "WITHSCORES")
	for i = 1, #rs, 2 do
		held[#held + 1] = rs[i]
		held[#held + 1] = tonumber(rs[i + 1]) - now()
		held[#held + 1] = redis.call("HGET", k.HOLDERS, rs[i]) or ""
	end
end
local waiting = 0
for _, token in ipairs(redis.call("LRANGE", k.LINE, 0, -1)) do
	local value = redis.call("HGET", k.PLACES, token)
	if value and tonumber(string.match(value, PLACE) or "0") >= now() then
		waiting = waiting + 1
	end
end
local reply = {what, permits, redis.call("GET", k.FENCE) or "", waiting}
for _, v in ipairs(held) do
	reply[#reply + 1] = v
end
return reply
