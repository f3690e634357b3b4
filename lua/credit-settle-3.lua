--[[
  Settles a pending credit down to what it finally brings in, once: an x402 `upto` authorization was credited at its
  signed maximum before its call (held, then charged like any call), and the chain is asked only for the call's
  charge; the credit becomes that charge, and the balance loses the rest. Postgres has already recorded the new
  amount; a retry finds the credit at it and changes nothing.

  KEYS[1] wallet hash         gw:{sNN}:w:<wallet>
  KEYS[2] applied credits     gw:{sNN}:credited   credit id -> amount
  KEYS[3] shard fence         gw:{sNN}:fence      the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  ARGV[1] ledger epoch the caller believes in   ARGV[2] credit id   ARGV[3] final amount µUSDC (integer >= 0)

  Returns {1, balance_after}      settled now
          {0, balance}            the credit already had this amount; nothing changed
          {0, 'UNKNOWN'}          no such credit applied here (the caller applies the recorded amount first)
          {0, 'FENCED', fence}    the caller's epoch is stale or a rebuild runs; nothing changed
  An error when the final amount is above the credit (a credit only settles down).
]]
--- @include "includes/fence"
local refused = fenceRefusal(KEYS[3])
if refused then return refused end
if ARGV[2] == '' or not string.match(ARGV[3], '^%d+$') or #ARGV[3] > 15 then
  return redis.error_reply('credit-settle-3: bad credit id or amount')
end
local balance = redis.call('HGET', KEYS[1], 'balance')
if balance and not string.match(balance, '^%-?%d+$') then return redis.error_reply('credit-settle-3: balance is not an integer') end
local credited = redis.call('HGET', KEYS[2], ARGV[2])
if not credited then return {0, 'UNKNOWN'} end
local final = tonumber(ARGV[3])
local was = tonumber(credited)
if final == was then return {0, tonumber(balance or '0')} end
if final > was then return redis.error_reply('credit-settle-3: a credit only settles down') end
local after = redis.call('HINCRBY', KEYS[1], 'balance', final - was)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return {1, after}
