--[[
  Write one batch of a ledger rebuild into one shard, only while the shard's fence is still the one this rebuild
  left there. A rebuild that stalled past its lock's lifetime (meanwhile another process rebuilt and opened the
  fences, and wallets were charged) is refused here, atomically, so its stale snapshot never lands over the live
  ledger. The rebuild orders its batches so that a balance never includes a credit the credited hash lacks.
  Each batch moves the fence on ('R:<epoch>' -> 'R:<epoch>:1' -> 'R:<epoch>:2' ...) in the same step as its
  writes, and the rebuild opens the shard only from the fence its last batch set: a replica promoted after the
  master took batches it never passed on (Redis replicates asynchronously) lacks that fence too, so the shard
  stays closed instead of opening without them.

  KEYS[1] shard fence     gw:{sNN}:fence      must hold ARGV[1]
  KEYS[2] first hash of the batch, then KEYS[3..n] more, all of this shard: gw:{sNN}:credited (credit id ->
          amount), gw:{sNN}:w:<wallet> or gw:{sNN}:k:<keyId>; one operation per key, a key may repeat
  ARGV[1] the closed fence this rebuild set, 'R:<epoch>', or the one its previous batch set, 'R:<epoch>:<n>'
  ARGV[2] the fence this batch sets, 'R:<epoch>:<n+1>'
  ARGV[3..] per hash KEYS[i] (i >= 2), in order: 'HSET' or 'HDEL', a count c > 0, then c field/value pairs
          (HSET) or c fields (HDEL)

  Returns {1, operations}          the batch is written and the fence moved on
          {0, 'FENCED', fence}     the fence is not what this rebuild left: nothing written
]]
--- @include "includes/fence"
local refused = fenceRefusal(KEYS[1])
if refused then return refused end
if not KEYS[2] then return redis.error_reply('ERR rebuild-write-2: no hash to write') end
if not ARGV[2] or not string.match(ARGV[2], '^R:%d+:%d+$') then return redis.error_reply('ERR rebuild-write-2: bad next fence') end

-- Every operation is parsed before the first write.
local ops = {}
local a = 3
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
redis.call('SET', KEYS[1], ARGV[2])
return {1, #ops}
