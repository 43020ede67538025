-- acquire: one attempt to take a key for a token, in a mode, with the
-- rules of the line and of the lock family; or a set of keys (ObtainMulti),
-- all of them or none.
-- parts: fence family line
--
-- KEYS    familyKeys(keys, token): per key its lock key, line, places,
--         gens, holders and fence counter; then the token's spent mark
-- ARGV[1] token
-- ARGV[2] lease (ttl) in ms, >= 1
-- ARGV[3] "1" to issue a fence (one per key), "0" not to
-- ARGV[4] how long to keep a place in line, in ms; "0": a single attempt
--         that takes no place
-- ARGV[5] "1" to take a place (a token's first attempt, or a single
--         attempt), "0" to renew the place the token has: a place is taken
--         once per token, so that a place confirmed by a reply was taken
--         before any hand-off to its token (a hand-off removes the place
--         for good). A renewal never takes a free key: only a hand-off to
--         its place gives it a key (a copy of it that runs after the
--         hand-off's lease ran out takes nothing). A set's renewal keeps
--         the keys handed to it so far, for ARGV[4] ms or their lease,
--         while it waits for the others.
-- ARGV[6] the mode: EXCLUSIVE, SHARED, or a number of permits (one key)
-- ARGV[7] PUB or SPUB: how a hand-off to the place is announced (PUBLISH,
--         or SPUBLISH on a Cluster)
-- ARGV[8] the channel it is announced on
-- ARGV[9] the holder's description, "" for none (see WithHolder)
-- returns {OK, fence, ...} when the token holds the key (every key) now,
--         with the lease ARGV[2] from now or longer: it fit with nobody in
--         line, it was handed to the token (by this run, or by an earlier
--         script whose announcement the waiter had not heard yet: a set's
--         last key), or an earlier attempt whose reply was
--         lost had taken it (a lease that ends later already is left as it
--         is). A fence per key: the hand-off's when a hand-off gave it the
--         key (this run's, or an earlier one this attempt crossed), else a
--         new fence with ARGV[3], else 0.
--         {NOT_OURS, ms} when it does not fit: ms is blockedFor's (the
--         longest of the keys' it does not hold). With ARGV[4] > 0 the token
--         now has a place in line (in the line of every key it does not
--         hold), kept ARGV[4] ms from now; a third element, 1, says that
--         a key is free with this new place first in its line: no release
--         will hand it on, the next attempt will (see Lines.handedTo).
--         {NO_PLACE, ONLY_LINE} when the token was to renew its place, and
--         has none (in a line of its keys): the place lapsed, or the key
--         was handed to it and that lease ran out; or when the token is
--         spent: a late copy of an attempt, which changes nothing. The
--         token must not be used again.
--         {WRONG_KIND, what} when a key holds (or its line waits for)
--         another kind of lock or data, which the mode can never share:
--         EXCLUSIVE, SHARED, "permits:<n>", "string", "layout<n>", or a
--         Redis type; nothing changed.
--         {OTHER_PERMITS, n} when the key is a semaphore of n permits, not
--         ARGV[6]; nothing changed.
--         {NO_FENCE, why} when a fence could not be issued (the token then
--         holds nothing, and has no place).

local token, ttl, fenced, keep, first, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3] == "1", tonumber(ARGV[4]), ARGV[5] == "1", ARGV[6]
local pub, channel, desc = ARGV[7], ARGV[8], ARGV[9]

if redis.call("EXISTS", SPENT) == 1 then
	return {NO_PLACE, ONLY_LINE}
end
local kinds = {}
for i, k in ipairs(locks) do
	local kind, other = kindOf(k)
	if not kind then
		return {WRONG_KIND, other}
	end
	local wrong = mismatch(k, mode, kind)
	if wrong then
		return wrong
	end
	if kind ~= EXCLUSIVE and kind ~= FOREIGN and redis.call("EXISTS", k.LINE) == 1 then
		-- (nothing fits an exclusive holder: no hand-off)
		local _, handed = handOff(k, nil) -- to the first in line, if it fits: maybe this token
		if handed > 0 then
			kind = kindOf(k)
		end
	end
	kinds[i] = kind
end

-- held: the token holds the key already (handed to its place, or taken by
-- an earlier copy of this attempt); mine: it holds every key; free: it may
-- take every key now (plain ifs: miniredis's Lua evaluates "x = x and f()
-- and g()" wrong)
local held, mine, free = {}, true, first
for i, k in ipairs(locks) do
	held[i] = isHolder(k, token, mode, kinds[i])
	if not held[i] then
		mine = false
	end
	if free and not fits(k, mode, kinds[i]) then
		free = false
	end
	if free and redis.call("LINDEX", k.LINE, 0) then
		free = false
	end
end
if mine or free then
	local fences = {}
	for i, k in ipairs(locks) do
		-- a hand-off of this run, or one that this attempt crossed, issued it a
		-- fence: it keeps it (one fence per acquisition)
		fences[i] = given[token .. " " .. k.K] or 0
		if mine and fences[i] == 0 then
			fences[i] = tonumber(redis.call("HGET", k.PLACES, HANDED_FIELD .. token) or "0")
		end
		if fenced and fences[i] == 0 then
			local problem
			fences[i], problem = issueFence(k.FENCE)
			if not fences[i] then
				for j, kj in ipairs(locks) do
					if drop(kj, token, mode, kinds[j]) then
						handOff(kj, nil, token)
					end
					withdraw(kj, token)
				end
				return {NO_FENCE, problem}
			end
		end
	end
	for i, k in ipairs(locks) do
		if mine then
			lengthenHold(k, token, mode, ttl)
		else
			take(k, token, mode, ttl, desc)
		end
		if not first then -- (a first attempt has no place yet)
			withdraw(k, token)
		end
	end
	return {OK, unpack(fences)}
end

local blocked = ONLY_LINE -- the longest of the keys' it does not hold; no expiry is longest
for i, k in ipairs(locks) do
	local b = ONLY_LINE
	if not held[i] then
		b = blockedFor(k, mode, kinds[i])
	end
	if b == NO_EXPIRY or blocked == NO_EXPIRY then
		blocked = NO_EXPIRY
	else
		blocked = math.max(blocked, b)
	end
end
if keep > 0 then
	for i, k in ipairs(locks) do
		local problem = not held[i] and fenced and fenceProblem(k.FENCE)
		if problem then
			for _, kj in ipairs(locks) do
				withdraw(kj, token)
			end
			return {NO_FENCE, problem}
		end
		if not first and not held[i] and redis.call("HEXISTS", k.PLACES, token) == 0 then
			for _, kj in ipairs(locks) do
				withdraw(kj, token)
			end
			return {NO_PLACE, blocked}
		end
	end
	local freeFirst = false -- a set's key is free, its new place first in line
	for i, k in ipairs(locks) do
		if held[i] then -- a set's key handed to it: kept while it waits for the others
			lengthenHold(k, token, mode, keep)
		else
			place(k, token, keep, ttl, ARGV[3], mode, pub, channel, desc)
			if first and not freeFirst and redis.call("LINDEX", k.LINE, 0) == token then
				freeFirst = fits(k, mode, kinds[i])
			end
		end
	end
	if freeFirst then
		return {NOT_OURS, blocked, 1}
	end
end
return {NOT_OURS, blocked}
