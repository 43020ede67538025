-- take: one attempt to take a plain lock (see the note at the top of
-- scripts.go): its keys (one, or a set's of one slot), all of them or none:
-- free, nobody waits, nothing else written.
-- parts: (none)
--
-- KEYS    per key, the lock key and its places hash: it exists while
--         anyone waits in the key's line, or a token of the key may be
--         marked spent (see spend.lua), so one EXISTS tells that the keys
--         are plain
-- ARGV[1] token
-- ARGV[2] lease (ttl) in ms, >= 1
-- returns {OK} when the token holds every key now, with the lease ARGV[2]
--         from now or longer: they were free and nobody waits, or an
--         earlier copy of this attempt took them (go-redis sent it again),
--         whose lease is only ever lengthened (see the lease clock);
--         {NOT_OURS, ms} when another holder of this layout has a key: ms
--         is its lease left; nothing changed;
--         {NOT_PLAIN} when a key is not plain (a line, a spent token,
--         holders of another kind, data this layout did not write): the
--         full acquire.lua decides; nothing changed.
--         An error reply from a Redis older than 7.0, where SET cannot
--         take NX and GET together.

local token, ttl = ARGV[1], ARGV[2]

local places = {}
for i = 2, #KEYS, 2 do
	places[#places + 1] = KEYS[i]
end
if redis.call("EXISTS", unpack(places)) > 0 then
	return {NOT_PLAIN}
end
local taken = {}
-- undo gives back the keys this run took, and returns reply
local function undo(reply)
	if #taken > 0 then
		redis.call("DEL", unpack(taken))
	end
	return reply
end
local blocked -- the lease left of another holder's key: the rest are only looked at
for i = 1, #KEYS, 2 do
	local key = KEYS[i]
	local held
	if blocked then
		held = redis.pcall("GET", key)
	else
		held = redis.pcall("SET", key, token, "NX", "GET", "PX", ttl)
	end
	if type(held) == "table" then
		if string.find(held.err, "WRONGTYPE", 1, true) then
			return undo({NOT_PLAIN})
		end
		return undo(redis.error_reply(held.err))
	elseif not held then
		if not blocked then
			taken[#taken + 1] = key
		end
	elseif held == token then
		local left = redis.call("PTTL", key)
		if left >= 0 and left < tonumber(ttl) then
			redis.call("PEXPIRE", key, ttl)
		end
	elseif string.sub(held, 1, #TOKEN_PREFIX) ~= TOKEN_PREFIX then
		return undo({NOT_PLAIN})
	elseif not blocked then
		blocked = redis.call("PTTL", key)
	end
end
if blocked then
	return undo({NOT_OURS, blocked})
end
return {OK}
