--[[
  Post a batch of holds (variadic: 3 keys per shard of the batch, then one per wallet, one per API key and one per
  item; a single settle is a batch of one). One call may span several shards, as in reserve-batch (a single Redis:
  every shard's waiting settles in one call; a Redis Cluster: one call per shard). Per item, replace the lock by the
  actual charge, bump the key's counters and append the charge to the outbox of its shard. A hold is resolved
  exactly once; a settle that arrives after the sweeper expired the hold still records the charge (the inference
  happened), and any other repeat is a no-op. A batch equals the same calls one by one.
  The gateway sends what it can sum: per wallet the batch's charges, per key its counters' increments, per item
  only its hold id and its charge event as JSON (ARGV checks: src/ledger/batchArgs.ts builds them from checked
  integers; the script checks their counts and shapes). When every item's hold is live and no id repeats (the
  common case) those sums are applied as they are, with the locks of the holds (read from their markers); otherwise
  the script goes item by item, reading each item's numbers from its event, and posts only the holds it may.
  Every wallet and key is read once per batch, the hold markers in one MGET, and each is written once at the end
  (HSET of the changed fields, one ZREM per shard, a SET with its lifetime per posted marker); TIME once. One XADD
  per shard of the batch: its entry holds every charge of the shard.

  for shard g = 1..G (ARGV[2]), at s = 3 * (g - 1):
  KEYS[s+1] holds zset     gw:{sNN}:holds
  KEYS[s+2] outbox stream  gw:{sNN}:outbox     one field 'e' per entry: the batch's charge events on the shard as
                                               JSON objects separated by commas (see below), so '[' .. e .. ']' is a
                                               JSON array
  KEYS[s+3] shard fence    gw:{sNN}:fence      the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  then for wallet w = 1..W (ARGV[3]), at x = 3 * G + w - 1:     KEYS[x+1] wallet hash   gw:{sNN}:w:<wallet>
  then for API key k = 1..K (ARGV[4]), at y = 3 * G + W + k - 1: KEYS[y+1] api key hash gw:{sNN}:k:<keyId>
  then for item i = 1..n (the items of shard 1 first, then those of shard 2, ...), at b = 3 * G + W + K + i - 1:
  KEYS[b+1] hold marker  gw:{sNN}:hd:<holdId>  "live|amount|wallet|keyId" → settled (kept ARGV[1] s)

  ARGV[1] marker ttl s   ARGV[2] G: the shards of the batch (at least 1)   ARGV[3] W: its wallets   ARGV[4] K: its keys
  ARGV[5] each item's wallet and key: two bytes per item, 48 + its wallet's w and 48 + its key's k
  then for shard g, at s = 5 + 2 * (g - 1):
  ARGV[s+1] ledger epoch the caller believes in for the shard   ARGV[s+2] the shard's items (at least 1)
  then for wallet w, at x = 5 + 2 * G + w - 1:
  ARGV[x+1] the charges of the wallet's items, µUSDC (summed)
  then for key k, at y = 5 + 2 * G + W + 7 * (k - 1), the sums over the key's items:
  ARGV[y+1] charges µUSDC (spent)   ARGV[y+2] requests (its items)   ARGV[y+3] prompt tokens   ARGV[y+4] completion
  tokens   ARGV[y+5] revenue: charges less provider costs (µUSDC, may be negative)   ARGV[y+6] cache-read tokens
  ARGV[y+7] cache-write tokens (5-minute and 1-hour)
  then for item i, at a = 5 + 2 * G + W + 7 * K + 2 * (i - 1):
  ARGV[a+1] hold id   ARGV[a+2] its charge event without its end: '{"type":"charge","hold","wallet","key","model",
            "amount","cost","pt","ct"[,"cr","cw","cw1h"]' (the event below up to "at"; the script adds
            ',"at":<ms>}'); its numbers are the item's own (amount µUSDC, cost µUSD, tokens)

  Outbox event: {"type":"charge","hold","wallet","key","model","amount","cost","pt","ct","cr","cw","cw1h","at"} (at:
  Redis clock, ms; cr, cw, cw1h: the cache split, only when one of them is not 0). It is JSON so the flusher hands
  its entries to Postgres as one json_to_recordset parameter, unparsed.

  Returns {0, 'FENCED', fence, g}  shard g's epoch is stale or a rebuild runs there: nothing changed for the whole
                                   batch (any shard), retry after it
          {2}                      every item charged (each hold was live, posted once)
          {1, item_1, ..., item_n}, each item one of
    {1}                          charged (hold posted, or late charge after expiry)
    {0, 'settled' | 'released'}  already resolved; nothing changed
    {0, 'UNKNOWN_HOLD'}
  Bad arguments anywhere: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
--- @include "includes/charges"
local G, W, K = tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0, tonumber(ARGV[4]) or 0
local valid = whole(ARGV[2]) and whole(ARGV[3]) and whole(ARGV[4]) and G >= 1 and W >= 1 and K >= 1
  and #ARGV >= 5 + 2 * G and whole(ARGV[1]) and tonumber(ARGV[1]) ~= 0
-- itemShard[i]: the shard (g) of item i.
local n, itemShard = 0, {}
for g = 1, valid and G or 0 do
  local count = ARGV[5 + 2 * g]
  if not whole(count) or tonumber(count) == 0 or n + tonumber(count) > #KEYS then valid = false; break end
  for _ = 1, tonumber(count) do n = n + 1; itemShard[n] = g end
end
local X, Y = 5 + 2 * G, 5 + 2 * G + W
local I = Y + 7 * K
local KB = 3 * G + W + K
valid = valid and #KEYS == KB + n and #ARGV == I + 2 * n and string.len(ARGV[5]) == 2 * n and sumsValid(X, W, Y, K)
-- Per item its wallet and key (indexes into the lists above).
local itemWallet, itemKey = {}, {}
for i = 1, valid and n or 0 do
  local a = I + 2 * (i - 1)
  local w, k = string.byte(ARGV[5], 2 * i - 1, 2 * i)
  w, k = w - 48, k - 48
  itemWallet[i], itemKey[i] = w, k
  if ARGV[a + 1] == '' or w < 1 or w > W or k < 1 or k > K
    or string.sub(ARGV[a + 2], 1, 24) ~= '{"type":"charge","hold":' then
    valid = false
  end
end
if not valid then return redis.error_reply('settle-batch: bad arguments') end
for g = 1, G do
  local refused = fenceRefusal(KEYS[3 * g], ARGV[4 + 2 * g], g)
  if refused then return refused end
end

-- Every item's hold marker in one MGET up front (false: none).
local states = redis.call('MGET', unpack(KEYS, KB + 1, KB + n))
-- What the batch unlocks per wallet and key, and whether every hold is live and posted once (the sums apply).
local wUnlock, kUnlock = {}, {}
for w = 1, W do wUnlock[w] = 0 end
for k = 1, K do kUnlock[k] = 0 end
local seen, fast = {}, true
for i = 1, n do
  local state, id = states[i], ARGV[I + 2 * i - 1]
  local held = state and string.match(state, '^live|(%d+)|')
  if not held or seen[id] then fast = false; break end
  seen[id] = true
  held = held + 0
  wUnlock[itemWallet[i]] = wUnlock[itemWallet[i]] + held
  kUnlock[itemKey[i]] = kUnlock[itemKey[i]] + held
end

-- The sums to apply, and which items are charged (charged[i]: 'live', its hold leaves the index, or 'expired').
local wCharge, kAdd, results
local charged = {}
if fast then
  wCharge, kAdd = gatewaySums(X, W, Y, K)
  for i = 1, n do charged[i] = 'live' end
else
  -- Item by item, each seeing the ones before it: a live hold is posted and unlocked, an expired one only charged.
  wCharge, kAdd = noSums(W, K)
  for w = 1, W do wUnlock[w] = 0 end
  for k = 1, K do kUnlock[k] = 0 end
  local now = {}
  results = {1}
  for i = 1, n do
    local name = KEYS[KB + i]
    local state = now[name]
    if state == nil then state = states[i] end
    local held = state and string.match(state, '^live|(%d+)|')
    if not state then
      results[i + 1] = {0, 'UNKNOWN_HOLD'}
    elseif not held and state ~= 'expired' then
      results[i + 1] = {0, state}
    else
      local w, k = itemWallet[i], itemKey[i]
      addEvent(ARGV[I + 2 * i], w, k, wCharge, kAdd)
      if held then
        wUnlock[w], kUnlock[k] = wUnlock[w] + held, kUnlock[k] + held
        charged[i] = 'live'
      else
        charged[i] = 'expired'
      end
      now[name] = 'settled'
      results[i + 1] = {1}
    end
  end
end

writeSums(3 * G, W, 3 * G + W, K, wCharge, wUnlock, kAdd, kUnlock)
-- Per shard: the posted holds leave the index, and their events go to the outbox as one entry.
local ending = eventEnd()
local ttl = tonumber(ARGV[1])
local i = 1
for g = 1, G do
  local zrem, events = {}, {}
  while itemShard[i] == g do
    if charged[i] then
      if charged[i] == 'live' then zrem[#zrem + 1] = ARGV[I + 2 * i - 1] end
      events[#events + 1] = ARGV[I + 2 * i]
      redis.call('SET', KEYS[KB + i], 'settled', 'EX', ttl)
    end
    i = i + 1
  end
  if #zrem > 0 then redis.call('ZREM', KEYS[3 * g - 2], unpack(zrem)) end
  appendEvents(KEYS[3 * g - 1], events, ending)
end
return results or {2}
