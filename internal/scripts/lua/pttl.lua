-- pttl: the lease left of a holder, in its mode, if it still holds its key
-- (the shortest of its keys', for a set); and how it holds them, for its
-- lock to be held again by another process that knows the token
-- (Locker.Resume). It writes nothing.
-- parts: generation family
--
-- KEYS    familyKeys(keys, ""): per key its lock key, line, places, gens,
--         holders and fence counter
-- ARGV[1] token
-- ARGV[2] the mode: EXCLUSIVE, SHARED or a number of permits; "" for the
--         mode the token holds the first key in
-- returns {OK, ms, mode, gen} when the token holds every key, in one mode:
--         ms the shortest lease left (>= 0), mode that mode, gen the highest
--         generation Redis ran for the token (0: none: see the lease
--         clock); {NOT_OURS, i} when the i-th key (from 1) is not held by
--         the token in that mode.

local token, mode = ARGV[1], ARGV[2]

local gen, left = 0, nil
for i, k in ipairs(locks) do
	local kind = kindOf(k)
	if not kind then
		return {NOT_OURS, i}
	elseif mode == "" and kind ~= FOREIGN then
		mode = kind
	end
	if not isHolder(k, token, mode, kind) then
		return {NOT_OURS, i}
	end
	gen = math.max(gen, ranGeneration(k.GENS, token))
	local ms
	if mode == EXCLUSIVE then
		ms = redis.call("PTTL", k.K)
	else
		ms = tonumber(redis.call("ZSCORE", k.K, token)) - now()
	end
	if not left or ms < left then
		left = ms
	end
end
return {OK, left, mode, gen}
