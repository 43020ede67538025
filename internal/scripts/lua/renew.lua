-- renew: sets the lease of an exclusive lock if it is still held (of every
-- key, for a set), and issues it a fence (one per key) when asked.
-- parts: fence generation
--
-- KEYS    per key, in this order: the lock key; its gens hash (see
--         leaseClock); its fence counter, when ARGV[4] is "1"; its holders
--         hash, when ARGV[5] is "1"
-- ARGV[1] token
-- ARGV[2] new ttl in ms (>= 1)
-- ARGV[3] the command's generation (see leaseClock)
-- ARGV[4] "1" to issue new fences, "0" not to
-- ARGV[5] "1" when the holder has a description (WithHolder), "0" if not
-- returns {OK, fence, ...} when every key held the token and its lease was
--         set to ARGV[2] (a fence per key: new, or 0);
--         {SUPERSEDED, 0} when the keys hold the token but Redis has run a
--         command of a later generation for it: nothing changed;
--         {NOT_OURS, i} when the set's i-th key (1 for one key) is absent
--         or holds anything else: nothing changed;
--         {NO_FENCE, why} when a fence could not be issued: nothing
--         changed.

local token, ttl, gen, fenced, described = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1", ARGV[5] == "1"
local stride = 2
if fenced then
	stride = stride + 1
end
if described then
	stride = stride + 1
end

for i = 1, #KEYS, stride do
	if redis.pcall("GET", KEYS[i]) ~= token then
		return {NOT_OURS, (i - 1) / stride + 1}
	end
	if ranLater(KEYS[i + 1], token, gen) then
		return {SUPERSEDED, 0}
	end
end
local fences = {}
for i = 1, #KEYS, stride do
	local fence, problem = 0, nil
	if fenced then
		fence, problem = issueFence(KEYS[i + 2])
		if not fence then
			return {NO_FENCE, problem}
		end
	end
	fences[#fences + 1] = fence
end
for i = 1, #KEYS, stride do
	recordGeneration(KEYS[i + 1], token, gen, ttl)
	redis.call("PEXPIRE", KEYS[i], ttl)
	if described then
		redis.call("PEXPIRE", KEYS[i + stride - 1], ttl)
	end
end
return {OK, unpack(fences)}
