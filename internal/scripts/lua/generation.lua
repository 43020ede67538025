-- generation.lua (a part): the generation check of the scripts that set a
-- lease (see leaseClock in Go).
--
-- ranLater(gens, token, gen) says whether Redis has run a command of a
-- later generation for token (strictly later: a command of the same
-- generation runs), whose lease then must not change.
-- recordGeneration(gens, token, gen, ttl) records gen, keeping the gens
-- hash at least as long as the lease of ttl ms that the command sets: every
-- command of a generation above 0 lengthens it, so that the record outlives
-- the token's hold, and a late copy of an older generation is refused
-- whenever it comes.

local function ranGeneration(gens, token)
	return tonumber(redis.pcall("HGET", gens, token) or "0") or 0
end

local function ranLater(gens, token, gen)
	return tonumber(gen) < ranGeneration(gens, token)
end

local function recordGeneration(gens, token, gen, ttl)
	gen = tonumber(gen)
	if gen > 0 and gen > ranGeneration(gens, token) then
		redis.call("HSET", gens, token, gen)
	end
	if gen > 0 and redis.call("PTTL", gens) < tonumber(ttl) then
		redis.call("PEXPIRE", gens, ttl)
	end
end
