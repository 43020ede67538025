-- fence_step: a step of a quorum Locker's fence (see quorum.fence in Go):
-- it increments the fence counter, or raises it to a value. Like every
-- script that issues fences (see fence.lua), it keeps the counter within
-- MAX_FENCE, where Lua's numbers are exact, and refuses a counter that is
-- not a non-negative integer below that.
-- parts: fence
--
-- KEYS[1] the fence counter
-- ARGV[1] "0" to increment the counter, or a value to raise it to
-- returns {OK, value}: the counter's value after the step (a raise that
--         finds the counter at the value or above returns it as it is, a
--         string); {NO_FENCE, why} when the counter holds something else
--         than a non-negative integer, when an increment finds it at
--         MAX_FENCE or beyond, or when ARGV[1] is beyond MAX_FENCE: nothing
--         changed.

local counter = KEYS[1]
local to = ARGV[1]

if to == "0" then
	local fence, problem = issueFence(counter)
	if not fence then
		return {NO_FENCE, problem}
	end
	return {OK, fence}
end
if tonumber(to) > MAX_FENCE then
	return {NO_FENCE, "a fence counter cannot be raised beyond 2^53-1 (the largest integer Lua holds exactly)"}
end
local problem = fenceProblem(counter)
if problem and not string.find(problem, "maximum", 1, true) then
	return {NO_FENCE, problem}
end
local v = redis.call("GET", counter)
if v and tonumber(v) >= tonumber(to) then
	return {OK, v} -- at least to already (exactly, as a string, however large)
end
redis.call("SET", counter, to)
return {OK, tonumber(to)}
