--[[
  Add money in (top-up, grant, redeem) to a wallet, once per credit id. Postgres has already recorded the
  credit; this makes the Redis side idempotent so a retry or the reconciler never credits twice.
  Everything is checked before the first write, and the balance moves before the id is marked applied: a script
  that stopped half way would otherwise leave a credit marked applied that never reached the balance.

  KEYS[1] wallet hash         gw:{sNN}:w:<wallet>
  KEYS[2] applied credits     gw:{sNN}:credited   credit id -> amount
  KEYS[3] shard fence         gw:{sNN}:fence      the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  ARGV[1] ledger epoch the caller believes in   ARGV[2] credit id   ARGV[3] amount µUSDC (integer > 0)

  Returns {1, balance_after}      credited now
          {0, balance}            this id was credited before; nothing changed
          {0, 'FENCED', fence}    the caller's epoch is stale or a rebuild runs; nothing changed
]]
--- @include "includes/fence"
local refused = fenceRefusal(KEYS[3])
if refused then return refused end
if ARGV[2] == '' or not string.match(ARGV[3], '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then
  return redis.error_reply('credit-3: bad credit id or amount')
end
local balance = redis.call('HGET', KEYS[1], 'balance')
if balance and not string.match(balance, '^%-?%d+$') then return redis.error_reply('credit-3: balance is not an integer') end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {0, tonumber(balance or '0')}
end
local after = redis.call('HINCRBY', KEYS[1], 'balance', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return {1, after}
