-- release: ends a hold or leaves the line, and hands the key to the first
-- in line while it fits.
-- parts: fence family line spend
--
-- KEYS    familyKeys(key, token): the lock key, line, places, gens,
--         holders, fence counter, and the token's spent mark
-- ARGV[1] token to release, or to take out of line
-- ARGV[2] the mode ARGV[1] holds the key in
-- ARGV[3] another token to take out of line (the place of a line of the
--         caller's Locker that nobody waits in any more), or ""
-- ARGV[4] > 0 to mark ARGV[1] spent for that many ms (see spend.lua), "0"
--         not to
-- ARGV[5] the caller's wake channel: hand-offs to it are returned, not
--         announced
-- returns {held, handoffs, token, fence, lease, token, fence, lease, ...}:
--         held is OK when ARGV[1] held the key and no longer does, else
--         NOT_OURS (the key was untouched, and ARGV[1] is no longer in
--         line); handoffs is how many places in line got the key; then the
--         hand-offs to places on the caller's channel.

local token, mode, alsoWithdraw, spendFor, mine = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]

local held = drop(token, mode, kindOf())
if not held then
	withdraw(token)
end
if alsoWithdraw ~= "" then
	withdraw(alsoWithdraw)
end
local own, n = handOff(mine)
if spendFor > 0 then
	spend(spendFor)
end
local reply = {NOT_OURS, n}
if held then
	reply[1] = OK
end
for _, v in ipairs(own) do
	reply[#reply + 1] = v
end
return reply
