--[[
  Keep one Responses API response (its whole conversation) and its output items for the store's lifetime, unless
  the wallet's stored conversations would then pass their bound: bytes and responses written in the current and the
  previous window of one lifetime each (anything older has expired), so what a wallet keeps in Redis at once is
  bounded. All or nothing; a refusal writes nothing. Its key count varies: 3, then one per output item.

  KEYS[1] store usage, current window    gw:{sNN}:rsu:<wallet>:<n>     hash: bytes, count
  KEYS[2] store usage, previous window   gw:{sNN}:rsu:<wallet>:<n-1>   hash: bytes, count
  KEYS[3] the stored response            gw:{sNN}:rsp:<wallet>:<responseId>
  KEYS[4..] its output items             gw:{sNN}:rit:<wallet>:<itemId>
  ARGV[1] lifetime of the stored values, s (also the window's length)
  ARGV[2] most bytes a wallet keeps over the two windows
  ARGV[3] most responses a wallet keeps over the two windows
  ARGV[4] the response's JSON
  ARGV[5..] each output item's JSON, in KEYS[4..]'s order

  Returns {1, bytes, count}          stored; the wallet's usage after it
          {0, 'FULL', bytes, count}  refused: it would pass a bound; the usage before it
  Bad arguments: an error reply, nothing changed.
]]
--- @include "includes/numbers"
if #ARGV ~= #KEYS + 1 or #KEYS < 3 or not (whole(ARGV[1]) and whole(ARGV[2]) and whole(ARGV[3])) or tonumber(ARGV[1]) == 0 then
  return redis.error_reply('store-response-3: bad arguments')
end
local ttl, maxBytes, maxCount = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = redis.call('HMGET', KEYS[1], 'bytes', 'count')
local prev = redis.call('HMGET', KEYS[2], 'bytes', 'count')
local bytes = (tonumber(cur[1]) or 0) + (tonumber(prev[1]) or 0)
local count = (tonumber(cur[2]) or 0) + (tonumber(prev[2]) or 0)
local size = 0
for i = 4, #ARGV do size = size + string.len(ARGV[i]) end
if bytes + size > maxBytes or count + 1 > maxCount then return {0, 'FULL', bytes, count} end
redis.call('SET', KEYS[3], ARGV[4], 'EX', ttl)
for i = 4, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ttl) end
redis.call('HINCRBY', KEYS[1], 'bytes', size)
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('EXPIRE', KEYS[1], 2 * ttl)
return {1, bytes + size, count + 1}
