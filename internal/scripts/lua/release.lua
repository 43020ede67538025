-- release: ends a hold or leaves the line, and hands each key to the first
-- in its line while it fits; for one key, or for a set's keys
-- (ObtainMulti).
-- parts: fence family line spend
--
-- KEYS    familyKeys(keys, token): per key its lock key, line, places,
--         gens, holders and fence counter; then the token's spent mark
-- ARGV[1] token to release, or to take out of line
-- ARGV[2] the mode ARGV[1] holds the keys in
-- ARGV[3] another token to take out of line (the place of a line of the
--         caller's Locker that nobody waits in any more), or ""
-- ARGV[4] > 0 to mark ARGV[1] spent for that many ms (see spend.lua), "0"
--         not to
-- ARGV[5] the caller's wake channel: hand-offs to it are returned, not
--         announced
-- ARGV[6] the side keys the holder may have written, to clean: "g" its
--         generations, "h" its description, "f" a hand-off's fence (see
--         drop in family.lua)
-- returns {held, handoffs, {i, ...}, {i, token, fence, lease, ...}}: held
--         is OK when ARGV[1] held every key and no longer does, else
--         NOT_OURS (a key it did not hold was untouched, and ARGV[1] is no
--         longer in its line); handoffs is how many places in line got a
--         key; then the indexes (from 1, in KEYS' order) of the keys it did
--         not hold; then the hand-offs to places on the caller's channel,
--         each with the index of its key.

local token, mode, alsoWithdraw, spendFor, mine, clean = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]

local missing, own, n = {}, {}, 0
for i, k in ipairs(locks) do
	if not drop(k, token, mode, kindOf(k), clean) then
		missing[#missing + 1] = i
		withdraw(k, token)
	end
	if alsoWithdraw ~= "" then
		withdraw(k, alsoWithdraw)
	end
	local handed, m = handOff(k, mine)
	n = n + m
	for j = 1, #handed, 3 do
		append(own, i, handed[j], handed[j + 1], handed[j + 2])
	end
end
if spendFor > 0 then
	spend(spendFor)
end
local held = OK
if #missing > 0 then
	held = NOT_OURS
end
return {held, n, missing, own}
