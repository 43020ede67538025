-- generation.lua (a part): newerGeneration, the generation check of the
-- scripts that set a lease (see leaseClock in Go).
--
-- newerGeneration(gens, token, gen, ttl) returns false when Redis has run a
-- command of a later generation for token, whose lease then must not
-- change; else it records gen, keeping the gens hash at least as long as
-- the lease of ttl ms that the command sets: every command of a generation
-- above 0 lengthens it, so that the record outlives the token's hold, and a
-- late copy of an older generation is refused whenever it comes.

local function newerGeneration(gens, token, gen, ttl)
	gen = tonumber(gen)
	local ran = tonumber(redis.pcall("HGET", gens, token) or "0") or 0
	if gen < ran then
		return false
	end
	if gen > ran then
		redis.call("HSET", gens, token, gen)
	end
	if gen > 0 and redis.call("PTTL", gens) < tonumber(ttl) then
		redis.call("PEXPIRE", gens, ttl)
	end
	return true
end
