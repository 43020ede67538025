-- pttl: the lease left of an exclusive lock, if it is still held.
-- parts: (none)
--
-- KEYS[1] the lock key
-- ARGV[1] token
-- returns {OK, ms} when the key holds the token: ms is its lease left
--         (>= 0); {NOT_OURS, 0} when it is absent or holds anything else.

local key = KEYS[1]
local token = ARGV[1]

if redis.pcall("GET", key) == token then
	return {OK, redis.call("PTTL", key)}
end
return {NOT_OURS, 0}
