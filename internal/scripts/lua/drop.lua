-- drop: releases a plain lock.
-- parts: (none)
--
-- KEYS[1] the lock key
-- KEYS[2] its places hash (see take.lua)
-- ARGV[1] token
-- returns OK when the key held the token and was deleted; NOT_OURS when it
--         did not hold it (nothing changed); NOT_PLAIN when it holds the
--         token but is not plain (someone waits, or a token may be spent):
--         nothing changed, and release.lua must hand it on.

local key, places = KEYS[1], KEYS[2]
local token = ARGV[1]

if redis.pcall("GET", key) ~= token then
	return NOT_OURS
end
if redis.call("EXISTS", places) == 1 then
	return NOT_PLAIN
end
redis.call("DEL", key)
return OK
