--[[
  Add money in (top-up, grant, redeem) to a wallet, once per credit id. Postgres has already recorded the
  credit; this makes the Redis side idempotent so a retry or the start-up reconciler never credits twice.

  KEYS[1] wallet hash         gw:{sNN}:w:<wallet>
  KEYS[2] applied credits     gw:{sNN}:credited   credit id -> amount
  ARGV[1] credit id   ARGV[2] amount µUSDC (> 0)

  Returns {1, balance_after}   credited now
          {0, balance}         this id was credited before; nothing changed
]]
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'balance') or '0')}
end
return {1, redis.call('HINCRBY', KEYS[1], 'balance', tonumber(ARGV[2]))}
