-- renew_shared: sets the lease of a shared holder or a permit if it is
-- still held, and issues it a fence when asked.
-- parts: fence generation family
--
-- KEYS    familyKeys(key, ""): the lock key, line, places, gens, holders,
--         fence counter
-- ARGV[1] token
-- ARGV[2] new ttl in ms (>= 1)
-- ARGV[3] the command's generation (see leaseClock)
-- ARGV[4] "1" to issue a new fence, "0" not to
-- ARGV[5] the mode: SHARED or a number of permits
-- returns what renew.lua returns.

local token, ttl, gen, fenced, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1", ARGV[5]

if not isHolder(token, mode, kindOf()) then
	return {NOT_OURS, 0}
end
if not newerGeneration(GENS, token, gen, ttl) then
	return {SUPERSEDED, 0}
end
local fence, problem = 0, nil
if fenced then
	fence, problem = issueFence(FENCE)
	if not fence then
		return {NO_FENCE, problem}
	end
end
redis.call("ZADD", K, now + ttl, token)
setExpiry()
return {OK, fence}
