-- fence.lua (a part): issueFence, which issues the next fence of a
-- counter, and fenceProblem, which says why it cannot.
--
-- Fences stop at MAX_FENCE, 2^53-1: Lua's numbers are doubles, exact up to
-- 2^53, and a fence rounded on its way out of a script would repeat. A
-- counter at MAX_FENCE or beyond, or holding something else than a
-- non-negative integer, issues no fence: issueFence returns nil and the
-- reason, having changed nothing.

local function fenceProblem(counter)
	local f = redis.pcall("GET", counter)
	if type(f) == "table" then
		return "the fence counter holds data of another type"
	elseif not f then
		return nil
	elseif not string.match(f, "^%d+$") then
		return "the fence counter holds something else than a non-negative integer"
	elseif tonumber(f) >= MAX_FENCE then
		return "the fence counter is at its maximum (2^53-1, the largest integer Lua holds exactly)"
	end
	return nil
end

local function issueFence(counter)
	local problem = fenceProblem(counter)
	if problem then
		return nil, problem
	end
	return redis.call("INCR", counter)
end
