--[[
  Reserve credit for a batch of inference requests (variadic: 2 keys per shard of the batch, 3 per wallet, 1 per
  API key and 1 per item; a single request is a batch of one). One call may span several shards: on a single Redis
  the gateway sends every shard's waiting reserves in one call (hash tags do not matter there), on a Redis Cluster
  one call per shard. The only gate on the chat path. Items are applied in order, each seeing what the ones before
  it did (rate counts, key budget, balance), so a batch equals the same calls one after another. Per item, checks
  in this order and holds nothing unless all pass (a rate-limit pass is still counted):
  key not revoked, hold id not used before, per-wallet sliding-window rate limit, the key's own requests per
  minute (when it has one: a sliding window of 60 s kept in the key hash's fields rw, rc, rp; it counts the
  requests it admitted, so a 402 does not use up the key's minute and a reserve retried after a lease gave credit
  back counts once), key budget, wallet available credit. Then it opens a hold that settle-batch / release-6
  resolve exactly once, or the sweeper expires.
  Each redis.call costs ~2 µs inside a script, and each argument a string to intern: the wallets and keys of the
  batch come once each (src/ledger/batchArgs.ts reserveArgs), every wallet, key and rate counter is read once per
  batch into locals, the hold markers in one MGET, and each is written once at the end (HSET of 'locked', one
  INCRBY per counter, one ZADD per shard, one MSET of the new markers); TIME once.

  for shard g = 1..G (ARGV[7]), at s = 2 * (g - 1):
  KEYS[s+1] holds zset    gw:{sNN}:holds        holdId -> expiry (ms, Redis clock), for the sweeper
  KEYS[s+2] shard fence   gw:{sNN}:fence        the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  then for wallet w = 1..W (ARGV[8]), at x = 2 * G + 3 * (w - 1):
  KEYS[x+1] wallet hash   gw:{sNN}:w:<wallet>   balance, locked
  KEYS[x+2] rate counter, current window    gw:{sNN}:rl:<wallet>:<n>
  KEYS[x+3] rate counter, previous window   gw:{sNN}:rl:<wallet>:<n-1>
  then for API key k = 1..K (ARGV[9]), at y = 2 * G + 3 * W + k - 1:
  KEYS[y+1] api key hash  gw:{sNN}:k:<keyId>    revoked, budget, spent, locked, counters; rw, rc, rp: the key's
                                                minute window number, its count, and the count of the minute before
  then for item i = 1..n (the items of shard 1 first, then those of shard 2, ...), at b = 2 * G + 3 * W + K + i - 1:
  KEYS[b+1] hold marker   gw:{sNN}:hd:<holdId>  "live|amount|wallet|keyId", then settled | released | expired

  ARGV[1] rate limit: requests per window
  ARGV[2] window length, ms
  ARGV[3] ms elapsed in the current window (gateway clock, same one that picked the window keys)
  ARGV[4] hold lifetime, ms
  ARGV[5] the keys' minute window number (gateway clock: floor(ms / 60000))
  ARGV[6] ms elapsed in that minute
  ARGV[7] G: the shards of the batch (at least 1)   ARGV[8] W: its wallets   ARGV[9] K: its API keys
  ARGV[10] each item's wallet and key: two bytes per item, 48 + its wallet's w and 48 + its key's k
  then for shard g, at s = 10 + 2 * (g - 1):
  ARGV[s+1] ledger epoch the caller believes in for the shard   ARGV[s+2] the shard's items (at least 1)
  then for key k, at y = 10 + 2 * G + 2 * (k - 1):
  ARGV[y+1] "wallet|keyId" of the key (its holds' markers say it)   ARGV[y+2] the key's requests per minute; 0: none
  then for item i, at a = 10 + 2 * G + 2 * K + 2 * (i - 1):
  ARGV[a+1] hold id (unique per request; a retry with the same id reserves nothing twice)
  ARGV[a+2] amount to hold, µUSDC

  Returns {0, 'FENCED', fence, g}  shard g's epoch is stale or a rebuild runs there: nothing changed for the whole
                                   batch (any shard), retry after it
          {1, item_1, ..., item_n}, each item one of
    {1, available_after, rate_remaining}   held (or already held under this id: rate_remaining 0)
    {0, 'UNAUTHORIZED'}                    key unknown or revoked
    {0, 'HOLD_RESOLVED'}                   this hold id was settled, released or expired before
    {0, 'RATE_LIMITED', retry_after_ms}          the wallet's window is full
    {0, 'RATE_LIMITED', retry_after_ms, 'key'}   the key's own minute is full (the wallet's slot is not taken)
    {0, 'KEY_BUDGET_EXCEEDED', budget_left}
    {0, 'INSUFFICIENT_BALANCE', available}
  Bad arguments anywhere: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
--- @include "includes/wallets"
local G, W, K = tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0
local valid = whole(ARGV[7]) and whole(ARGV[8]) and whole(ARGV[9]) and G >= 1 and W >= 1 and K >= 1
  and #ARGV >= 10 + 2 * G
-- itemShard[i]: the shard (g) of item i.
local n, itemShard = 0, {}
for g = 1, valid and G or 0 do
  local count = ARGV[10 + 2 * g]
  if not whole(count) or tonumber(count) == 0 or n + tonumber(count) > #KEYS then valid = false; break end
  for _ = 1, tonumber(count) do n = n + 1; itemShard[n] = g end
end
local X, Y, KB = 2 * G, 2 * G + 3 * W, 2 * G + 3 * W + K
local I = 10 + 2 * G + 2 * K
valid = valid and #KEYS == KB + n and #ARGV == I + 2 * n and string.len(ARGV[10]) == 2 * n and whole(ARGV[1])
  and whole(ARGV[2]) and whole(ARGV[3]) and whole(ARGV[4]) and tonumber(ARGV[2]) ~= 0 and whole(ARGV[5])
  and whole(ARGV[6]) and tonumber(ARGV[6]) < 60000
for k = 1, valid and K or 0 do
  local y = 10 + 2 * G + 2 * (k - 1)
  valid = valid and ARGV[y + 1] ~= '' and whole(ARGV[y + 2])
end
-- Per item its wallet and key (indexes into the lists above).
local itemWallet, itemKey = {}, {}
for i = 1, valid and n or 0 do
  local a = I + 2 * (i - 1)
  local w, k = string.byte(ARGV[10], 2 * i - 1, 2 * i)
  w, k = w - 48, k - 48
  itemWallet[i], itemKey[i] = w, k
  if ARGV[a + 1] == '' or not whole(ARGV[a + 2]) or w < 1 or w > W or k < 1 or k > K then valid = false end
end
if not valid then return redis.error_reply('reserve-batch: bad arguments') end
for g = 1, G do
  local refused = fenceRefusal(KEYS[2 * g], ARGV[9 + 2 * g], g)
  if refused then return refused end
end

local limit, window, elapsed, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local minute, inMinute = tonumber(ARGV[5]), tonumber(ARGV[6])
-- Read once per batch, by key name (items of one wallet share them); written back once at the end.
local keys, markers, rates = {}, {}, {}
local walletOrder, keyOrder, rateOrder, holds, newMarkers = {}, {}, {}, {}, {}
for g = 1, G do holds[g] = {} end
local function apiKey(name)
  local k = keys[name]
  if not k then
    local v = redis.call('HMGET', name, 'revoked', 'budget', 'spent', 'locked', 'rw', 'rc', 'rp')
    k = {revoked = v[1], budget = v[2], spent = tonumber(v[3]) or 0, locked = tonumber(v[4]) or 0}
    -- The key's minute counters as of this minute: the stored minute, or the one before it, or nothing.
    local rw = tonumber(v[5])
    if rw == minute then
      k.rcur, k.rprev = tonumber(v[6]) or 0, tonumber(v[7]) or 0
    elseif rw == minute - 1 then
      k.rcur, k.rprev = 0, tonumber(v[6]) or 0
    else
      k.rcur, k.rprev = 0, 0
    end
    keys[name] = k
  end
  return k
end
-- Every item's hold marker in one MGET up front (false: none), rather than a GET per item.
do
  local v = redis.call('MGET', unpack(KEYS, KB + 1, KB + n))
  for i = 1, n do markers[KEYS[KB + i]] = v[i] end
end
-- A wallet's two window counters in one MGET (the items of a batch share one window).
local function ratePair(cur, prev)
  if not rates[cur] or not rates[prev] then
    local v = redis.call('MGET', cur, prev)
    rates[cur] = rates[cur] or {count = tonumber(v[1]) or 0, added = 0}
    rates[prev] = rates[prev] or {count = tonumber(v[2]) or 0, added = 0}
  end
  return rates[cur], rates[prev]
end

local now
local results = {1}
for i = 1, n do
  local a, x, y = I + 2 * (i - 1), X + 3 * (itemWallet[i] - 1), Y + itemKey[i] - 1
  local marker, ky = KEYS[KB + i], 10 + 2 * G + 2 * (itemKey[i] - 1)
  local amount, rpm = tonumber(ARGV[a + 2]), tonumber(ARGV[ky + 2])
  local k = apiKey(KEYS[y + 1])
  local m = k.revoked == '0' and markers[marker]
  local r
  if k.revoked ~= '0' then
    r = {0, 'UNAUTHORIZED'}
  elseif m then
    if string.sub(m, 1, 5) ~= 'live|' then
      r = {0, 'HOLD_RESOLVED'}
    else
      local w = wallet(KEYS[x + 1])
      r = {1, w.balance - w.locked, 0}
    end
  else
    local cur, prev = ratePair(KEYS[x + 2], KEYS[x + 3])
    local weighted = math.floor(prev.count * (window - elapsed) / window) + cur.count
    local keyWeighted = rpm > 0 and math.floor(k.rprev * (60000 - inMinute) / 60000) + k.rcur
    if weighted >= limit then
      r = {0, 'RATE_LIMITED', window - elapsed}
    elseif keyWeighted and keyWeighted >= rpm then
      r = {0, 'RATE_LIMITED', 60000 - inMinute, 'key'}
    else
      if cur.added == 0 then rateOrder[#rateOrder + 1] = KEYS[x + 2] end
      cur.count, cur.added = cur.count + 1, cur.added + 1
      local remaining = limit - weighted - 1
      local left = k.budget and k.budget ~= '' and tonumber(k.budget) - k.spent - k.locked
      if left and left < amount then
        r = {0, 'KEY_BUDGET_EXCEEDED', left}
      else
        local w = wallet(KEYS[x + 1])
        local available = w.balance - w.locked
        if available < amount then
          r = {0, 'INSUFFICIENT_BALANCE', available}
        else
          if not now then
            local t = redis.call('TIME')
            now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
          end
          if not w.dirty then w.dirty = true; walletOrder[#walletOrder + 1] = KEYS[x + 1] end
          if not k.dirty then k.dirty = true; keyOrder[#keyOrder + 1] = KEYS[y + 1] end
          w.locked, k.locked = w.locked + amount, k.locked + amount
          local zadd = holds[itemShard[i]]
          zadd[#zadd + 1] = now + ttl
          zadd[#zadd + 1] = ARGV[a + 1]
          markers[marker] = 'live|' .. ARGV[a + 2] .. '|' .. ARGV[ky + 1]
          newMarkers[#newMarkers + 1] = marker
          if keyWeighted then
            k.rcur, k.rateDirty = k.rcur + 1, true
            remaining = math.min(remaining, rpm - keyWeighted - 1)
          end
          r = {1, available - amount, remaining}
        end
      end
    end
  end
  results[i + 1] = r
end

for _, name in ipairs(walletOrder) do redis.call('HSET', name, 'locked', int(wallets[name].locked)) end
for _, name in ipairs(keyOrder) do
  local k = keys[name]
  if k.rateDirty then
    redis.call('HSET', name, 'locked', int(k.locked), 'rw', int(minute), 'rc', int(k.rcur), 'rp', int(k.rprev))
  else
    redis.call('HSET', name, 'locked', int(k.locked))
  end
end
for _, name in ipairs(rateOrder) do
  local added = rates[name].added
  if redis.call('INCRBY', name, added) == added then redis.call('PEXPIRE', name, window * 2) end
end
for g = 1, G do
  if #holds[g] > 0 then redis.call('ZADD', KEYS[2 * g - 1], unpack(holds[g])) end
end
if #newMarkers > 0 then
  local set = {}
  for _, name in ipairs(newMarkers) do set[#set + 1] = name; set[#set + 1] = markers[name] end
  redis.call('MSET', unpack(set))
end
return results
