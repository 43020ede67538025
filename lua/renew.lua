-- renew: sets the lease of an exclusive lock if it is still held, and
-- issues it a fence when asked.
-- parts: fence generation
--
-- KEYS[1] the lock key
-- KEYS[2] its gens hash (see leaseClock)
-- KEYS[3] its fence counter, when ARGV[4] is "1"
-- KEYS[#] its holders hash, when ARGV[5] is "1" (the last key)
-- ARGV[1] token
-- ARGV[2] new ttl in ms (>= 1)
-- ARGV[3] the command's generation (see leaseClock)
-- ARGV[4] "1" to issue a new fence, "0" not to
-- ARGV[5] "1" when the holder has a description (WithHolder), "0" if not
-- returns {OK, fence} when the key held the token and its lease was set to
--         ARGV[2] (fence: the new fence, or 0);
--         {SUPERSEDED, 0} when the key holds the token but Redis has run a
--         command of a later generation for it: nothing changed;
--         {NOT_OURS, 0} when the key is absent or holds anything else:
--         nothing changed;
--         {NO_FENCE, why} when the fence could not be issued: nothing
--         changed.

local key, gens, counter, holders = KEYS[1], KEYS[2], KEYS[3], KEYS[#KEYS]
local token, ttl, gen, fenced, described = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1", ARGV[5] == "1"

if redis.pcall("GET", key) ~= token then
	return {NOT_OURS, 0}
end
if not newerGeneration(gens, token, gen, ttl) then
	return {SUPERSEDED, 0}
end
local fence, problem = 0, nil
if fenced then
	fence, problem = issueFence(counter)
	if not fence then
		return {NO_FENCE, problem}
	end
end
redis.call("PEXPIRE", key, ttl)
if described then
	redis.call("PEXPIRE", holders, ttl)
end
return {OK, fence}
