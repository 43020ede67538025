-- pttl: the lease left of an exclusive lock, if it is still held (the
-- shortest of its keys', for a set).
-- parts: (none)
--
-- KEYS    the lock key (each key of a set)
-- ARGV[1] token
-- returns {OK, ms} when every key holds the token: ms is the shortest
--         lease left (>= 0); {NOT_OURS, 0} when a key is absent or holds
--         anything else.

local token = ARGV[1]

local left
for _, key in ipairs(KEYS) do
	if redis.pcall("GET", key) ~= token then
		return {NOT_OURS, 0}
	end
	local ms = redis.call("PTTL", key)
	if not left or ms < left then
		left = ms
	end
end
return {OK, left}
