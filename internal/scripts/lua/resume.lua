-- resume: how a token holds keys, for its lock to be held again by another
-- process that knows the token (Locker.Resume). It writes nothing.
-- parts: generation family
--
-- KEYS    familyKeys(keys, ""): per key its lock key, line, places, gens,
--         holders and fence counter
-- ARGV[1] token
-- returns {OK, mode, gen, ms} when the token holds every key, in one mode:
--         mode EXCLUSIVE, SHARED or a number of permits; gen the highest
--         generation Redis ran for the token (0: none: see the lease
--         clock); ms the shortest lease left (>= 0);
--         {NOT_OURS, i} when the i-th key (from 1) is not held by the token,
--         or in another mode than the first.

local token = ARGV[1]

local mode, gen, left
for i, k in ipairs(locks) do
	local kind = kindOf(k)
	if not kind or kind == FOREIGN or (mode and kind ~= mode) or not isHolder(k, token, kind, kind) then
		return {NOT_OURS, i}
	end
	mode = kind
	gen = math.max(gen or 0, ranGeneration(k.GENS, token))
	local ms = redis.call("PTTL", k.K)
	if kind ~= EXCLUSIVE then
		ms = tonumber(redis.call("ZSCORE", k.K, token)) - now
	end
	if not left or ms < left then
		left = ms
	end
end
return {OK, mode, gen, left}
