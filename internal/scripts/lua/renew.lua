-- renew: sets the lease of a holder, in its mode, if it still holds its key
-- (every key, for a set), and issues it a fence (one per key) when asked.
-- parts: fence generation family
--
-- KEYS    familyKeys(keys, ""): per key its lock key, line, places, gens,
--         holders and fence counter
-- ARGV[1] token
-- ARGV[2] new ttl in ms (>= 1)
-- ARGV[3] the command's generation (see the lease clock)
-- ARGV[4] "1" to issue new fences, "0" not to
-- ARGV[5] the mode: EXCLUSIVE, SHARED or a number of permits
-- ARGV[6] "1" when the holder has a description (WithHolder), "0" if not
-- returns {OK, fence, ...} when every key held the token and its lease was
--         set to ARGV[2] (a fence per key: new, or 0);
--         {SUPERSEDED, 0} when the keys hold the token but Redis has run a
--         command of a later generation for it: nothing changed;
--         {NOT_OURS, i} when the set's i-th key (1 for one key) is not held
--         by the token: nothing changed;
--         {NO_FENCE, why} when a fence could not be issued: nothing
--         changed.

local token, ttl, gen, fenced, mode, described = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1", ARGV[5], ARGV[6] == "1"

for i, k in ipairs(locks) do
	if not isHolder(k, token, mode, kindOf(k)) then
		return {NOT_OURS, i}
	end
	if ranLater(k.GENS, token, gen) then
		return {SUPERSEDED, 0}
	end
end
local fences = {}
for i, k in ipairs(locks) do
	local problem
	fences[i] = 0
	if fenced then
		fences[i], problem = issueFence(k.FENCE)
		if not fences[i] then
			return {NO_FENCE, problem}
		end
	end
end
for _, k in ipairs(locks) do
	recordGeneration(k.GENS, token, gen, ttl)
	if mode == EXCLUSIVE then
		redis.call("PEXPIRE", k.K, ttl)
	else
		redis.call("ZADD", k.K, now() + ttl, token)
		setExpiry(k)
	end
	if described then
		lengthen(k.HOLDERS, ttl)
	end
end
return {OK, unpack(fences)}
