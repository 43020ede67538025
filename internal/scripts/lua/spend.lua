-- spend.lua (a part, after family.lua): spend, which marks a token spent.
--
-- spend(ms) marks the token whose spent mark is SPENT spent for ms: an
-- attempt of a spent token changes nothing (see acquire.lua), so that a
-- copy of it that go-redis sent again, and that runs after its Obtain gave
-- up or its lock was released, takes neither the key nor a place. A token
-- is marked only when such a copy may exist (see Timing.MayResend): the mark
-- is the exception, not one per release. While a mark may exist, the
-- places hash (the first key's) has the field SPENT_FIELD and lasts at
-- least as long, which keeps the plain scripts (take.lua, drop.lua: they
-- look at no mark) off the key.

local function spend(ms)
	redis.call("SET", SPENT, "1", "PX", ms)
	redis.call("HSET", locks[1].PLACES, SPENT_FIELD, "1")
	lengthen(locks[1].PLACES, ms)
end
