-- A settle batch's sums, written once for settle-batch and settle-leased-batch (after includes/numbers). The
-- gateway (src/ledger/batchArgs.ts) sends each wallet of the batch once with its items' charges (ARGV[X + w]) and
-- each API key once with 7 sums (from ARGV[Y + 7 * (k - 1) + 1]: charges, requests, prompt tokens, completion
-- tokens, revenue, cache-read tokens, cache-write tokens); the script adds what the holds unlock. When an item may
-- not be charged (a repeat, a hold resolved before) the sums are rebuilt item by item from the charge events.
local KEY_FIELDS = {'spent', 'requests', 'prompt_tokens', 'completion_tokens', 'revenue', 'cached_prompt_tokens',
  'cache_write_tokens'}
-- Whether the sums' arguments are whole numbers (revenue may be negative).
local function sumsValid(X, W, Y, K)
  for w = 1, W do
    if not whole(ARGV[X + w]) then return false end
  end
  for k = 1, K do
    local y = Y + 7 * (k - 1)
    if not (whole(ARGV[y + 1]) and whole(ARGV[y + 2]) and whole(ARGV[y + 3]) and whole(ARGV[y + 4])
      and string.match(ARGV[y + 5], '^%-?%d+$') and string.len(ARGV[y + 5]) <= 15 and whole(ARGV[y + 6])
      and whole(ARGV[y + 7])) then
      return false
    end
  end
  return true
end
-- The gateway's sums: per wallet its charges, per key its 7 counters' increments.
local function gatewaySums(X, W, Y, K)
  local wCharge, kAdd = {}, {}
  for w = 1, W do wCharge[w] = ARGV[X + w] + 0 end
  for k = 1, K do
    local y = Y + 7 * (k - 1)
    kAdd[k] = {ARGV[y + 1] + 0, ARGV[y + 2] + 0, ARGV[y + 3] + 0, ARGV[y + 4] + 0, ARGV[y + 5] + 0, ARGV[y + 6] + 0,
      ARGV[y + 7] + 0}
  end
  return wCharge, kAdd
end
-- Sums to be built item by item (addEvent), all 0.
local function noSums(W, K)
  local wCharge, kAdd = {}, {}
  for w = 1, W do wCharge[w] = 0 end
  for k = 1, K do kAdd[k] = {0, 0, 0, 0, 0, 0, 0} end
  return wCharge, kAdd
end
-- An item charged on the item-by-item path: its numbers from its event (the JSON the gateway built, less its end).
local function addEvent(json, w, k, wCharge, kAdd)
  local e = cjson.decode(json .. '}')
  local add = kAdd[k]
  wCharge[w] = wCharge[w] + e.amount
  add[1], add[2], add[3], add[4] = add[1] + e.amount, add[2] + 1, add[3] + e.pt, add[4] + e.ct
  add[5], add[6], add[7] = add[5] + e.amount - e.cost, add[6] + (e.cr or 0), add[7] + (e.cw or 0) + (e.cw1h or 0)
end
-- Wallets (KEYS[wk + w]) and keys (KEYS[kk + k]) written with the sums: one read and one write each, none for one
-- the batch did not charge.
local function writeSums(wk, W, kk, K, wCharge, wUnlock, kAdd, kUnlock)
  for w = 1, W do
    local name = KEYS[wk + w]
    if wUnlock[w] ~= 0 then
      local v = redis.call('HMGET', name, 'balance', 'locked')
      redis.call('HSET', name, 'balance', int((v[1] or 0) - wCharge[w]), 'locked', int((v[2] or 0) - wUnlock[w]))
    elseif wCharge[w] ~= 0 then
      redis.call('HSET', name, 'balance', int((redis.call('HGET', name, 'balance') or 0) - wCharge[w]))
    end
  end
  for k = 1, K do
    local add = kAdd[k]
    if add[2] > 0 then
      local name = KEYS[kk + k]
      local v = redis.call('HMGET', name, 'locked', 'spent', 'requests', 'prompt_tokens', 'completion_tokens',
        'revenue', 'cached_prompt_tokens', 'cache_write_tokens')
      local fields = {'locked', int((v[1] or 0) - kUnlock[k])}
      for f = 1, 7 do
        -- The cache counters (6, 7) only once there is something to count: a key without caching keeps its hash.
        if f <= 5 or add[f] ~= 0 or v[f + 1] then
          fields[#fields + 1] = KEY_FIELDS[f]
          fields[#fields + 1] = int((v[f + 1] or 0) + add[f])
        end
      end
      redis.call('HSET', name, unpack(fields))
    end
  end
end
-- What ends each charge event: the Redis clock in ms (one TIME per batch).
local function eventEnd()
  local t = redis.call('TIME')
  return ',"at":' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)) .. '}'
end
-- One outbox entry (field 'e') with the events (JSON less their end), separated by commas; none if no event.
local function appendEvents(outbox, events, ending)
  if #events > 0 then redis.call('XADD', outbox, '*', 'e', table.concat(events, ending .. ',') .. ending) end
end
