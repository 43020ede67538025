-- pttl_shared: the lease left of a shared holder or a permit.
-- parts: (none)
--
-- KEYS[1] the lock key
-- ARGV[1] token
-- returns {OK, ms} when the token holds the key: ms is its lease left
--         (>= 0); {NOT_OURS, 0} when it does not.

local key = KEYS[1]
local token = ARGV[1]

local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local lease = redis.pcall("ZSCORE", key, token)
if type(lease) == "string" and tonumber(lease) >= now then
	return {OK, tonumber(lease) - now}
end
return {NOT_OURS, 0}
