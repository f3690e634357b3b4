-- A whole number of at most 15 digits (a Lua double holds it exactly), as the arguments carry µUSDC and counts.
local function whole(v) return v ~= nil and string.match(v, '^%d+$') ~= nil and string.len(v) <= 15 end
-- An integer as Redis and JSON take it (no exponent, no '.0').
local function int(v) return string.format('%d', v) end
