-- take: one attempt to take a plain lock (see the note at the top of
-- scripts.go): free, nobody waits, nothing else written.
-- parts: (none)
--
-- KEYS[1] the lock key
-- KEYS[2] its places hash: it exists while anyone waits in the key's line,
--         or a token of the key may be marked spent (see spend.lua), so one
--         EXISTS tells that the key is plain
-- ARGV[1] token
-- ARGV[2] lease (ttl) in ms, >= 1
-- returns {OK} when the token holds the key now, with the lease ARGV[2]
--         from now or longer: it was free and nobody waits, or an earlier
--         copy of this attempt took it (go-redis sent it again: see
--         counted), whose lease is only ever lengthened (see leaseClock);
--         {NOT_OURS, ms} when another holder of this layout has it: ms is
--         its lease left;
--         {NOT_PLAIN} when the key is not plain (a line, a spent token,
--         holders of another kind, data this layout did not write): the
--         full acquire.lua decides.
--         An error reply from a Redis older than 7.0, where SET cannot
--         take NX and GET together.

local key, places = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], ARGV[2]

if redis.call("EXISTS", places) == 1 then
	return {NOT_PLAIN}
end
local held = redis.pcall("SET", key, token, "NX", "GET", "PX", ttl)
if type(held) == "table" then
	if string.find(held.err, "WRONGTYPE", 1, true) then
		return {NOT_PLAIN}
	end
	return redis.error_reply(held.err)
elseif not held then
	return {OK}
elseif held == token then
	local left = redis.call("PTTL", key)
	if left >= 0 and left < tonumber(ttl) then
		redis.call("PEXPIRE", key, ttl)
	end
	return {OK}
elseif string.sub(held, 1, #TOKEN_PREFIX) ~= TOKEN_PREFIX then
	return {NOT_PLAIN}
end
return {NOT_OURS, redis.call("PTTL", key)}
