-- renew_shared: sets the lease of a shared holder or a permit if it is
-- still held (of every key, for a set), and issues it a fence (one per key)
-- when asked.
-- parts: fence generation family
--
-- KEYS    familyKeys(keys, ""): per key its lock key, line, places, gens,
--         holders and fence counter
-- ARGV[1] token
-- ARGV[2] new ttl in ms (>= 1)
-- ARGV[3] the command's generation (see leaseClock)
-- ARGV[4] "1" to issue new fences, "0" not to
-- ARGV[5] the mode: SHARED or a number of permits
-- returns what renew.lua returns.

local token, ttl, gen, fenced, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1", ARGV[5]

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
	redis.call("ZADD", k.K, now + ttl, token)
	setExpiry(k)
end
return {OK, unpack(fences)}
