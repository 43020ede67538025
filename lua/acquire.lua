-- acquire: one attempt to take the key for a token, in a mode, with the
-- rules of the line and of the lock family.
-- parts: fence family line
--
-- KEYS    familyKeys(key, token): the lock key, line, places, gens,
--         holders, fence counter, and the token's spent mark
-- ARGV[1] token
-- ARGV[2] lease (ttl) in ms, >= 1
-- ARGV[3] "1" to issue a fence, "0" not to
-- ARGV[4] how long to keep a place in line, in ms; "0": a single attempt
--         that takes no place
-- ARGV[5] "1" to take a place (a token's first attempt, or a single
--         attempt), "0" to renew the place the token has: a place is taken
--         once per token, so that a place confirmed by a reply was taken
--         before any hand-off to its token (a hand-off removes the place
--         for good). A renewal never takes a free key: only a hand-off to
--         its place gives it the key (a copy of it that runs after the
--         hand-off's lease ran out takes nothing).
-- ARGV[6] the mode: EXCLUSIVE, SHARED, or a number of permits
-- ARGV[7] PUB or SPUB: how a hand-off to the place is announced (PUBLISH,
--         or SPUBLISH on a Cluster)
-- ARGV[8] the channel it is announced on
-- ARGV[9] the holder's description, "" for none (see WithHolder)
-- returns {OK, fence} when the token holds the key now, with the lease
--         ARGV[2] from now or longer: it fit with nobody in line, it was
--         handed to the token (by this run, or by an earlier script whose
--         announcement the waiter had not heard yet), or an earlier attempt
--         whose reply was lost had taken it (a lease that ends later
--         already is left as it is). fence is the hand-off's fence when a
--         hand-off gave it the key (this run's, or an earlier one this
--         attempt crossed), else a new fence with ARGV[3], else 0.
--         {NOT_OURS, ms} when it does not fit: ms is blockedFor's. With
--         ARGV[4] > 0 the token now has a place in line, kept ARGV[4] ms
--         from now.
--         {NO_PLACE, ONLY_LINE} when the token was to renew its place, and
--         has none: the place lapsed, or the key was handed to it and that
--         lease ran out; or when the token is spent: a late copy of an
--         attempt, which changes nothing. The token must not be used again.
--         {WRONG_KIND, what} when the key holds (or its line waits for)
--         another kind of lock or data, which the mode can never share:
--         EXCLUSIVE, SHARED, "permits:<n>", "string", "layout<n>", or a
--         Redis type; nothing changed.
--         {OTHER_PERMITS, n} when the key is a semaphore of n permits, not
--         ARGV[6]; nothing changed.
--         {NO_FENCE, why} when the fence could not be issued (the token
--         then holds nothing, and has no place).

local token, ttl, fenced, keep, first, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3] == "1", tonumber(ARGV[4]), ARGV[5] == "1", ARGV[6]
local pub, channel, desc = ARGV[7], ARGV[8], ARGV[9]

if redis.call("EXISTS", SPENT) == 1 then
	return {NO_PLACE, ONLY_LINE}
end
local kind, other = kindOf()
if not kind then
	return {WRONG_KIND, other}
end
local wrong = mismatch(mode, kind)
if wrong then
	return wrong
end
if redis.call("EXISTS", LINE) == 1 then
	handOff(nil) -- to the first in line, if it fits: maybe this token
	kind = kindOf()
end
local mine = isHolder(token, mode, kind)
if mine or (first and redis.call("EXISTS", LINE) == 0 and fits(mode, kind)) then
	-- a hand-off of this run, or one that this attempt crossed, issued it a
	-- fence: it keeps it (one fence per acquisition)
	local fence, problem = given[token] or tonumber(redis.call("HGET", PLACES, HANDED_FIELD .. token) or "0"), nil
	if fenced and fence == 0 then
		fence, problem = issueFence(FENCE)
	end
	if not fence then
		if drop(token, mode, kind) then
			handOff(nil)
		end
		withdraw(token)
		return {NO_FENCE, problem}
	end
	if mine then
		lengthenHold(token, mode, ttl)
	else
		take(token, mode, ttl, desc)
	end
	withdraw(token)
	return {OK, fence}
end
if keep > 0 then
	local problem = fenced and fenceProblem(FENCE)
	if problem then
		withdraw(token)
		return {NO_FENCE, problem}
	end
	if not first and redis.call("HEXISTS", PLACES, token) == 0 then
		return {NO_PLACE, blockedFor(mode, kind)}
	end
	place(token, keep, ttl, ARGV[3], mode, pub, channel, desc)
end
return {NOT_OURS, blockedFor(mode, kind)}
