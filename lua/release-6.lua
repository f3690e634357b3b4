--[[
  Void or expire a hold: give the locked credit back, charge nothing, append the event to the outbox.
  'expire' (the sweeper) only acts on a hold whose expiry has passed on the Redis clock, so it can never race a
  live request; 'release' (upstream failed) acts at once. Exactly once per hold, like settle-batch.

  KEYS[1] wallet hash  KEYS[2] api key hash  KEYS[3] holds zset
  KEYS[4] hold marker  gw:{sNN}:hd:<holdId>  "live|amount|wallet|keyId" → released | expired (kept ARGV[4] s)
  KEYS[5] outbox stream (field 'e': {"type","hold","wallet","key","amount","at"} as JSON, like settle-batch's event)
  KEYS[6] shard fence  gw:{sNN}:fence  the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  ARGV[1] ledger epoch the caller believes in   ARGV[2] hold id   ARGV[3] 'release' | 'expire'   ARGV[4] marker ttl s

  Returns {1, amount_released}
          {0, 'settled' | 'released' | 'expired' | 'UNKNOWN_HOLD' | 'LIVE'}  nothing changed
          {0, 'FENCED', fence}  stale epoch or a rebuild runs: nothing changed, retry after it
]]
--- @include "includes/fence"
local refused = fenceRefusal(KEYS[6])
if refused then return refused end
if ARGV[2] == '' or (ARGV[3] ~= 'release' and ARGV[3] ~= 'expire') or not string.match(ARGV[4], '^[1-9]%d*$') then
  return redis.error_reply('release-6: bad arguments')
end
local id = ARGV[2]
local marker = redis.call('GET', KEYS[4])
if not marker then return {0, 'UNKNOWN_HOLD'} end
local amount, wallet, keyId = string.match(marker, '^live|(%-?%d+)|([^|]*)|(.*)$')
if not amount then return {0, marker} end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'expire' and tonumber(redis.call('ZSCORE', KEYS[3], id) or '0') > now then
  return {0, 'LIVE'}
end

amount = tonumber(amount)
-- As an integer string: the negated lock of a lease its charges brought to 0 is Lua's -0, which HINCRBY refuses.
local back = string.format('%d', -amount)
redis.call('HINCRBY', KEYS[1], 'locked', back)
redis.call('HINCRBY', KEYS[2], 'locked', back)
redis.call('ZREM', KEYS[3], id)
local state = 'released'
if ARGV[3] == 'expire' then state = 'expired' end
redis.call('SET', KEYS[4], state, 'EX', tonumber(ARGV[4]))
redis.call('XADD', KEYS[5], '*', 'e', '{"type":"' .. ARGV[3] .. '","hold":' .. cjson.encode(id) .. ',"wallet":'
  .. cjson.encode(wallet) .. ',"key":' .. string.format('%d', tonumber(keyId)) .. ',"amount":' .. string.format('%d', amount)
  .. ',"at":' .. string.format('%d', now) .. '}')
return {1, amount}
