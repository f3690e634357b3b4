--[[
  Write one batch of a ledger rebuild into one shard, only while the shard's fence is still the one this rebuild
  closed. A rebuild that stalled past its lock's lifetime (meanwhile another process rebuilt and opened the
  fences, and wallets were charged) is refused here, atomically, so its stale snapshot never lands over the live
  ledger. The rebuild orders its batches so that a balance never includes a credit the credited hash lacks.

  KEYS[1] shard fence     gw:{sNN}:fence      must hold ARGV[1]
  KEYS[2] first hash of the batch, then KEYS[3..n] more, all of this shard: gw:{sNN}:credited (credit id ->
          amount), gw:{sNN}:w:<wallet> or gw:{sNN}:k:<keyId>; one operation per key, a key may repeat
  ARGV[1] the closed fence this rebuild set, 'R:<epoch>'
  ARGV[2..] per hash KEYS[i] (i >= 2), in order: 'HSET' or 'HDEL', a count c > 0, then c field/value pairs
          (HSET) or c fields (HDEL)

  Returns {1, operations}          the batch is written
          {0, 'FENCED', fence}     the fence is not this rebuild's: nothing written
]]
--- @include "includes/fence"
local refused = fenceRefusal(KEYS[1])
if refused then return refused end
if not KEYS[2] then return redis.error_reply('ERR rebuild-write-2: no hash to write') end

-- Every operation is parsed before the first write.
local ops = {}
local a = 2
for i = 2, #KEYS do
  local op, c = ARGV[a], tonumber(ARGV[a + 1])
  if (op ~= 'HSET' and op ~= 'HDEL') or not c or c < 1 or c ~= math.floor(c) then
    return redis.error_reply('ERR rebuild-write-2: bad operation for key ' .. (i - 1))
  end
  local last = a + 1 + c * (op == 'HSET' and 2 or 1)
  if last > #ARGV then return redis.error_reply('ERR rebuild-write-2: arguments end inside an operation') end
  ops[#ops + 1] = {op, a + 2, last}
  a = last + 1
end
if a ~= #ARGV + 1 then return redis.error_reply('ERR rebuild-write-2: more arguments than operations') end

for i, o in ipairs(ops) do
  redis.call(o[1], KEYS[i + 1], unpack(ARGV, o[2], o[3]))
end
return {1, #ops}
