--[[
  Post a batch of holds (variadic: 3 keys per shard of the batch, then 3 per item; a single settle is a batch of
  one). One call may span several shards, as in reserve-batch (a single Redis: every shard's waiting settles in one
  call; a Redis Cluster: one call per shard). Per item, replace the lock by the actual charge, bump the key's
  counters and append the charge to the outbox of its shard. A hold is resolved exactly once; a settle that arrives
  after the sweeper expired the hold still records the charge (the inference happened), and any other repeat is a
  no-op. Items are applied in order, each seeing the ones before it (a hold id twice in one batch charges once), so
  a batch equals the same calls one by one.
  Every wallet and key is read once per batch, the hold markers in one MGET, and each is written once at the end
  (HSET of the changed fields, one ZREM per shard, a SET with its lifetime per posted marker); TIME once. One XADD per shard of the batch: its entry holds every charge of the shard.

  for shard g = 1..G (ARGV[2]), at s = 3 * (g - 1):
  KEYS[s+1] holds zset     gw:{sNN}:holds
  KEYS[s+2] outbox stream  gw:{sNN}:outbox     one field 'e' per entry: the batch's charge events on the shard as
                                               JSON objects separated by commas (see below), so '[' .. e .. ']' is a
                                               JSON array
  KEYS[s+3] shard fence    gw:{sNN}:fence      the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  then for item i = 1..n (the items of shard 1 first, then those of shard 2, ...), at b = 3 * G + 3 * (i - 1):
  KEYS[b+1] wallet hash  KEYS[b+2] api key hash
  KEYS[b+3] hold marker  gw:{sNN}:hd:<holdId>  "live|amount|wallet|keyId" → settled (kept ARGV[1] s)

  ARGV[1] marker ttl s   ARGV[2] G: the shards of the batch (at least 1)
  then for shard g, at s = 2 + 2 * (g - 1):
  ARGV[s+1] ledger epoch the caller believes in for the shard   ARGV[s+2] the shard's items (at least 1)
  then for item i, at a = 2 + 2 * G + 11 * (i - 1):
  ARGV[a+1] hold id   ARGV[a+2] charge µUSDC   ARGV[a+3] prompt tokens   ARGV[a+4] completion tokens
  ARGV[a+5] provider cost µUSD   ARGV[a+6] model id   ARGV[a+7] wallet   ARGV[a+8] key id
  ARGV[a+9] cache-read tokens   ARGV[a+10] 5-minute cache-write tokens   ARGV[a+11] 1-hour cache-write tokens
            (of the prompt tokens; the key's cached_prompt_tokens and cache_write_tokens counters add them)

  Outbox event: {"type":"charge","hold","wallet","key","model","amount","cost","pt","ct","cr","cw","cw1h","at"} (at:
  Redis clock, ms; cr, cw, cw1h: the cache split, only when one of them is not 0). It is JSON so the flusher hands its entries to Postgres as one json_to_recordset parameter,
  unparsed.

  Returns {0, 'FENCED', fence, g}  shard g's epoch is stale or a rebuild runs there: nothing changed for the whole
                                   batch (any shard), retry after it
          {1, item_1, ..., item_n}, each item one of
    {1, balance_after}           charged (hold posted, or late charge after expiry)
    {0, 'settled' | 'released'}  already resolved; nothing changed
    {0, 'UNKNOWN_HOLD'}
  Bad arguments anywhere: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
--- @include "includes/wallets"
--- @include "includes/charges"
local G = whole(ARGV[2]) and tonumber(ARGV[2]) or 0
local valid = G >= 1 and #ARGV >= 2 + 2 * G and whole(ARGV[1]) and tonumber(ARGV[1]) ~= 0
-- itemShard[i]: the shard (g) of item i.
local n, itemShard = 0, {}
for g = 1, valid and G or 0 do
  local count = ARGV[2 + 2 * g]
  if not whole(count) or tonumber(count) == 0 or n + tonumber(count) > #KEYS then valid = false; break end
  for _ = 1, tonumber(count) do n = n + 1; itemShard[n] = g end
end
valid = valid and #KEYS == 3 * G + 3 * n and #ARGV == 2 + 2 * G + 11 * n
local I = 2 + 2 * G
for i = 1, valid and n or 0 do
  local a = I + 11 * (i - 1)
  if ARGV[a + 1] == '' or not (whole(ARGV[a + 2]) and whole(ARGV[a + 3]) and whole(ARGV[a + 4])
    and string.match(ARGV[a + 5], '^%-?%d+$') and string.len(ARGV[a + 5]) <= 15 and whole(ARGV[a + 8])
    and whole(ARGV[a + 9]) and whole(ARGV[a + 10]) and whole(ARGV[a + 11])) then
    valid = false
  end
end
if not valid then return redis.error_reply('settle-batch: bad arguments') end
for g = 1, G do
  local refused = fenceRefusal(KEYS[3 * g], ARGV[1 + 2 * g], g)
  if refused then return refused end
end

-- Every item's hold marker in one MGET up front (false: none), by key name (wallets and keys: the includes);
-- written back once at the end.
local markers = {}
do
  local names = {}
  for i = 1, n do names[i] = KEYS[3 * G + 3 * (i - 1) + 3] end
  local v = redis.call('MGET', unpack(names))
  for i = 1, n do markers[names[i]] = v[i] end
end
local posted, zrem = {}, {}
for g = 1, G do zrem[g] = {} end
local results = {1}
for i = 1, n do
  local b, a = 3 * G + 3 * (i - 1), I + 11 * (i - 1)
  local id, charge = ARGV[a + 1], tonumber(ARGV[a + 2])
  local name = KEYS[b + 3]
  local state = markers[name]
  if not state then
    results[i + 1] = {0, 'UNKNOWN_HOLD'}
  elseif string.sub(state, 1, 5) ~= 'live|' and state ~= 'expired' then
    results[i + 1] = {0, state}
  else
    local held = 0
    local w = wallet(KEYS[b + 1])
    if state ~= 'expired' then
      held = tonumber(string.match(state, '^live|(%-?%d+)|'))
      w.locked, w.lockedChanged = w.locked - held, true
      local z = zrem[itemShard[i]]
      z[#z + 1] = id
    end
    w.balance = w.balance - charge
    chargeKey(KEYS[b + 2], a, held, a + 9, itemShard[i])
    markers[name] = 'settled'
    posted[#posted + 1] = name
    results[i + 1] = {1, w.balance}
  end
end

writeWalletsAndKeys()
for g = 1, G do
  if #zrem[g] > 0 then redis.call('ZREM', KEYS[3 * g - 2], unpack(zrem[g])) end
  appendCharges(KEYS[3 * g - 1], g)
end
local ttl = tonumber(ARGV[1])
for _, name in ipairs(posted) do redis.call('SET', name, 'settled', 'EX', ttl) end
return results
