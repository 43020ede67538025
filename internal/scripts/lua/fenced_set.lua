-- fenced_set: writes a value guarded by a fencing token (SetFenced).
-- parts: (none)
--
-- KEYS[1] the resource key, a hash with the fields "value" and "fence"
-- ARGV[1] value
-- ARGV[2] the writer's fence (>= 1)
-- returns {OK, fence} when ARGV[2] >= the resource's fence: value and fence
--         are set to ARGV[1] and ARGV[2];
--         {STALE_FENCE, fence} when ARGV[2] is lower than the resource's
--         fence (nothing changed). fence is the resource's fence before the
--         call (0 for a new resource).
--         {WRONG_KIND, what} when the key holds something else than such a
--         hash: what is its Redis type, or "hash" for a hash whose fence
--         field is not a non-negative integer; nothing changed.

local resource = KEYS[1]
local value, fence = ARGV[1], tonumber(ARGV[2])

local kind = redis.call("TYPE", resource).ok
if kind ~= "hash" and kind ~= "none" then
	return {WRONG_KIND, kind}
end
local seen = "0"
if kind == "hash" then -- SetFenced's: a fence and at most a value
	local n = redis.call("HLEN", resource)
	seen = redis.call("HGET", resource, "fence") or ""
	if not string.match(seen, "^%d+$") or n > 2 or (n == 2 and redis.call("HEXISTS", resource, "value") == 0) then
		return {WRONG_KIND, "hash"}
	end
end
seen = tonumber(seen)
if fence < seen then
	return {STALE_FENCE, seen}
end
redis.call("HSET", resource, "value", value, "fence", ARGV[2])
return {OK, seen}
