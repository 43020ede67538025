-- consts.lua: the values that Go and the scripts share, written by
-- luaConsts in scripts.go (go test -run TestScripts_ConstsFileIsCurrent
-- -update writes it). Every script starts with it.

local LAYOUT = "rl1"
local TOKEN_PREFIX = "rl1:"
local OK = 1
local NOT_OURS = 0
local SUPERSEDED = 2
local STALE_FENCE = 3
local NOT_PLAIN = -1
local WRONG_KIND = -2
local OTHER_PERMITS = -3
local NO_FENCE = -4
local NO_PLACE = -5
local NO_EXPIRY = -1
local ONLY_LINE = -2
local EXCLUSIVE = "x"
local SHARED = "s"
local FOREIGN = "?"
local SEMAPHORE = "p"
local PUB = "p"
local SPUB = "s"
local SPENT_FIELD = "~spent"
local HANDED_FIELD = "~fence:"
local MAX_FENCE = 9007199254740991
