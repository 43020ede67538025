-- pttl_shared: the lease left of a shared holder or a permit (the shortest
-- of its keys', for a set).
-- parts: (none)
--
-- KEYS    the lock key (each key of a set)
-- ARGV[1] token
-- returns {OK, ms} when the token holds every key: ms is the shortest lease
--         left (>= 0); {NOT_OURS, 0} when it does not.

local token = ARGV[1]

local clock = redis.call("TIME")
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local left
for _, key in ipairs(KEYS) do
	local lease = redis.pcall("ZSCORE", key, token)
	if type(lease) ~= "string" or tonumber(lease) < now then
		return {NOT_OURS, 0}
	end
	if not left or tonumber(lease) - now < left then
		left = tonumber(lease) - now
	end
end
return {OK, left}
