-- drop: releases a plain lock: its keys (one, or a set's of one slot).
-- parts: (none)
--
-- KEYS    per key, the lock key and its places hash (see take.lua)
-- ARGV[1] token
-- returns {OK} when every key held the token and was deleted;
--         {NOT_OURS, i, ...} when the keys at the indexes i (from 1) did not
--         hold it (they are untouched; the others were deleted);
--         {NOT_PLAIN} when a key holds the token but is not plain (someone
--         waits, or a token may be spent): nothing changed, and release.lua
--         must hand it on.

local token = ARGV[1]

local ours, places, missing = {}, {}, {NOT_OURS}
for i = 1, #KEYS, 2 do
	if redis.pcall("GET", KEYS[i]) == token then
		ours[#ours + 1], places[#places + 1] = KEYS[i], KEYS[i + 1]
	else
		missing[#missing + 1] = (i + 1) / 2
	end
end
if #ours == 0 then
	return missing
elseif redis.call("EXISTS", unpack(places)) > 0 then
	return {NOT_PLAIN}
end
redis.call("DEL", unpack(ours))
if #missing > 1 then
	return missing
end
return {OK}
