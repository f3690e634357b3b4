--[[
  Charge a batch of requests that were admitted under credit leases (lease-8) (variadic: 2 keys per shard of the
  batch, then one per wallet, one per API key, one per lease and one per item). One call may span several shards,
  as settle-batch (a single Redis: every shard's waiting leased settles in one call; a Redis Cluster: one call per
  shard). Per item: the charge comes off the balance and out of the lease's lock (the lease covered the request,
  so what it charged is no longer locked), the key's counters move, and the charge goes to the outbox of its
  shard, exactly as settle-batch does for a hold of its own. Each charge has its own id, posted exactly once (its
  marker); a repeat is a no-op. A lease already expired or closed still takes the charge (the inference happened)
  with nothing left to unlock, as settle-batch does after the sweeper. A batch equals the same calls one by one.
  One XADD per shard of the batch. The holds zset is not touched: a lease leaves it when its owner closes it or the
  sweeper expires it.
  As in settle-batch the gateway sends each wallet and key once with the sums of their items (includes/charges),
  per item its charge id, what its lease may give up for it and its charge event. When no charge was posted
  before, no id repeats, every lease is live and holds what its items give up (the common case), the sums apply
  as they are; otherwise the script goes item by item, each lease giving up at most what it still holds.

  for shard g = 1..G (ARGV[3]), at s = 2 * (g - 1):
  KEYS[s+1] outbox stream  gw:{sNN}:outbox  one field 'e' per entry: the batch's charge events, as in settle-batch
  KEYS[s+2] shard fence    gw:{sNN}:fence
  then for wallet w = 1..W (ARGV[4]), at x = 2 * G + w - 1:          KEYS[x+1] wallet hash
  then for API key k = 1..K (ARGV[5]), at y = 2 * G + W + k - 1:     KEYS[y+1] api key hash
  then for lease l = 1..L (ARGV[6]), at z = 2 * G + W + K + l - 1:   KEYS[z+1] lease marker gw:{sNN}:hd:<leaseId>
                                      "live|amount|wallet|keyId": amount shrinks by what it covered
  then for item i = 1..n (the items of shard 1 first, then those of shard 2, ...), at b = 2 * G + W + K + L + i - 1:
  KEYS[b+1] charge marker gw:{sNN}:hd:<chargeId>  absent → settled (kept ARGV[1] s)

  ARGV[1] marker ttl s   ARGV[2] each item's wallet, key and lease: three bytes per item, 48 + its w, 48 + its k,
  48 + its l   ARGV[3] G: the shards of the batch (at least 1)
  ARGV[4] W: the batch's wallets   ARGV[5] K: its API keys   ARGV[6] L: its leases
  then for shard g, at s = 6 + 2 * (g - 1):
  ARGV[s+1] ledger epoch the caller believes in for the shard   ARGV[s+2] the shard's items (at least 1)
  then for wallet w, at x = 6 + 2 * G + w - 1: ARGV[x+1] the charges of the wallet's items, µUSDC (summed)
  then for key k, at y = 6 + 2 * G + W + 7 * (k - 1), the sums over the key's items, as in settle-batch:
  ARGV[y+1] charges µUSDC   ARGV[y+2] requests   ARGV[y+3] prompt tokens   ARGV[y+4] completion tokens
  ARGV[y+5] revenue (may be negative)   ARGV[y+6] cache-read tokens   ARGV[y+7] cache-write tokens
  then for item i, at a = 6 + 2 * G + W + 7 * K + 3 * (i - 1):
  ARGV[a+1] charge id
  ARGV[a+2] the most its lease gives up for it, µUSDC: the least of its charge and what the request held of the
            lease (an overrun beyond it is charged to the balance, never taken from what the lease covers for
            other requests); the lease gives up less only when it holds less
  ARGV[a+3] its charge event less its end, as in settle-batch (the script adds ',"at":<ms>}')

  Returns {0, 'FENCED', fence, g}  shard g's epoch is stale or a rebuild runs there: nothing changed for the whole
                                   batch (any shard), retry after it
          {2}                   every item charged, each lease giving up ARGV[a+2] for it
          {1, item_1, ..., item_n}, each item one of
    {1, covered}         charged; `covered` µUSDC of it came out of the lease's lock
    {0, 'settled'}       this charge id was posted before; nothing changed
    {0, 'UNKNOWN_HOLD'}  Redis does not know the lease (it lost its data): nothing changed
  Bad arguments anywhere: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
--- @include "includes/charges"
local G, W, K, L = tonumber(ARGV[3]) or 0, tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0
local valid = whole(ARGV[3]) and whole(ARGV[4]) and whole(ARGV[5]) and whole(ARGV[6]) and G >= 1 and W >= 1
  and K >= 1 and L >= 1 and #ARGV >= 6 + 2 * G and whole(ARGV[1]) and tonumber(ARGV[1]) ~= 0
-- itemShard[i]: the shard (g) of item i.
local n, itemShard = 0, {}
for g = 1, valid and G or 0 do
  local count = ARGV[6 + 2 * g]
  if not whole(count) or tonumber(count) == 0 or n + tonumber(count) > #KEYS then valid = false; break end
  for _ = 1, tonumber(count) do n = n + 1; itemShard[n] = g end
end
local X, Y = 6 + 2 * G, 6 + 2 * G + W
local I = Y + 7 * K
local ZB, KB = 2 * G + W + K, 2 * G + W + K + L
valid = valid and #KEYS == KB + n and #ARGV == I + 3 * n and string.len(ARGV[2]) == 3 * n and sumsValid(X, W, Y, K)
-- Per item its wallet, key and lease (indexes into the lists above).
local itemWallet, itemKey, itemLease = {}, {}, {}
for i = 1, valid and n or 0 do
  local a = I + 3 * (i - 1)
  local w, k, l = string.byte(ARGV[2], 3 * i - 2, 3 * i)
  w, k, l = w - 48, k - 48, l - 48
  itemWallet[i], itemKey[i], itemLease[i] = w, k, l
  if ARGV[a + 1] == '' or not whole(ARGV[a + 2]) or w < 1 or w > W or k < 1 or k > K or l < 1 or l > L
    or string.sub(ARGV[a + 3], 1, 24) ~= '{"type":"charge","hold":' then
    valid = false
  end
end
if not valid then return redis.error_reply('settle-leased-batch: bad arguments') end
for g = 1, G do
  local refused = fenceRefusal(KEYS[2 * g], ARGV[5 + 2 * g], g)
  if refused then return refused end
end

-- The leases' markers and the charges' in one MGET: a lease parsed once per batch as {amount, rest} while live,
-- {resolved = true} after, false if absent.
local v = redis.call('MGET', unpack(KEYS, ZB + 1, KB + n))
local leases = {}
for l = 1, L do
  local m = v[l]
  if not m then
    leases[l] = false
  else
    local amount, rest = string.match(m, '^live|(%d+)|(.*)$')
    leases[l] = amount and {amount = amount + 0, start = amount + 0, rest = rest} or {resolved = true}
  end
end
local wUnlock, kUnlock = {}, {}
for w = 1, W do wUnlock[w] = 0 end
for k = 1, K do kUnlock[k] = 0 end
-- Whether the sums apply: no charge posted before or twice, every lease live and holding what its items give up.
local seen, fast, give = {}, true, {}
for i = 1, n do
  local name, l = KEYS[KB + i], leases[itemLease[i]]
  if v[L + i] or seen[name] or not l or l.resolved then fast = false; break end
  seen[name] = true
  local take = ARGV[I + 3 * i - 1] + 0
  give[itemLease[i]] = (give[itemLease[i]] or 0) + take
  wUnlock[itemWallet[i]] = wUnlock[itemWallet[i]] + take
  kUnlock[itemKey[i]] = kUnlock[itemKey[i]] + take
end
for l = 1, fast and L or 0 do
  if (give[l] or 0) > leases[l].amount then fast = false; break end
end

local wCharge, kAdd, results
local charged = {}
if fast then
  wCharge, kAdd = gatewaySums(X, W, Y, K)
  for l = 1, L do leases[l].amount = leases[l].amount - (give[l] or 0) end
  for i = 1, n do charged[i] = true end
else
  -- Item by item, each seeing the ones before it: a live lease gives up what it still holds, at most ARGV[a+2].
  wCharge, kAdd = noSums(W, K)
  for w = 1, W do wUnlock[w] = 0 end
  for k = 1, K do kUnlock[k] = 0 end
  results = {1}
  for i = 1, n do
    local name, l = KEYS[KB + i], leases[itemLease[i]]
    if v[L + i] or seen[name] == 'posted' then
      results[i + 1] = {0, v[L + i] or 'settled'}
    elseif not l then
      results[i + 1] = {0, 'UNKNOWN_HOLD'}
    else
      local covered, w, k = 0, itemWallet[i], itemKey[i]
      if not l.resolved then
        covered = math.min(ARGV[I + 3 * i - 1] + 0, l.amount)
        l.amount = l.amount - covered
        wUnlock[w], kUnlock[k] = wUnlock[w] + covered, kUnlock[k] + covered
      end
      addEvent(ARGV[I + 3 * i], w, k, wCharge, kAdd)
      seen[name] = 'posted'
      charged[i] = true
      results[i + 1] = {1, covered}
    end
  end
end

writeSums(2 * G, W, 2 * G + W, K, wCharge, wUnlock, kAdd, kUnlock)
-- A lease whose lock reached 0 stays open (live|0): its owner closes it, or the sweeper expires it.
for l = 1, L do
  local lease = leases[l]
  if lease and not lease.resolved and lease.amount ~= lease.start then
    redis.call('SET', KEYS[ZB + l], 'live|' .. int(lease.amount) .. '|' .. lease.rest)
  end
end
-- Per shard: the charges' markers, and their events as one outbox entry.
local ending = eventEnd()
local ttl = tonumber(ARGV[1])
local i = 1
for g = 1, G do
  local events = {}
  while itemShard[i] == g do
    if charged[i] then
      events[#events + 1] = ARGV[I + 3 * i]
      redis.call('SET', KEYS[KB + i], 'settled', 'EX', ttl)
    end
    i = i + 1
  end
  appendEvents(KEYS[2 * g - 1], events, ending)
end
return results or {2}
