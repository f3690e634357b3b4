-- A settle's charges, written once for settle-batch and settle-leased-batch (after includes/numbers and
-- includes/wallets): the API key hashes a batch touches, each read once (HMGET of its counters) and kept by key
-- name, the batch's outbox events, and the write back of wallets and keys at the end. An item's ARGV from `a`:
-- a+1 charge (hold) id, a+2 charge µUSDC, a+3 prompt tokens, a+4 completion tokens, a+5 provider cost µUSD,
-- a+6 model id, a+7 wallet, a+8 key id; and from `c` (each script says where) the prompt's cache split: c cache-read
-- tokens, c+1 5-minute cache-write tokens, c+2 1-hour cache-write tokens (all within the prompt tokens).
local KEY_FIELDS = {'locked', 'spent', 'requests', 'prompt_tokens', 'completion_tokens', 'revenue',
  'cached_prompt_tokens', 'cache_write_tokens'}
local keys, keyOrder = {}, {}
local function apiKey(name)
  local k = keys[name]
  if not k then
    local v = redis.call('HMGET', name, unpack(KEY_FIELDS))
    k = {}
    for f = 1, #KEY_FIELDS do k[f] = tonumber(v[f]) or 0 end
    keys[name] = k
    keyOrder[#keyOrder + 1] = name
  end
  return k
end
-- The batch's charge events (settle-batch's header says their JSON) by shard of the call (g), stamped with one
-- Redis TIME per batch.
local at
local events = {}
-- The event's cache split ("cr" reads, "cw" 5-minute and "cw1h" 1-hour writes), only when there is one: an event
-- without it reads as none (the flusher's COALESCE), so a charge without caching keeps its event as it was.
local function cacheJson(cr, cw, cw1h)
  if cr + cw + cw1h == 0 then return '' end
  return ',"cr":' .. int(cr) .. ',"cw":' .. int(cw) .. ',"cw1h":' .. int(cw1h)
end
-- Item `a`'s charge on the API key hash `name`: the key gives up `unlocked` of its lock, its counters move, and
-- the charge joins the events of the batch's shard `g` (1 when not given). `c`: where the item's cache split
-- starts in ARGV.
local function chargeKey(name, a, unlocked, c, g)
  local charge = tonumber(ARGV[a + 2])
  local cr, cw, cw1h = tonumber(ARGV[c]), tonumber(ARGV[c + 1]), tonumber(ARGV[c + 2])
  local k = apiKey(name)
  k[1], k[2], k[3] = k[1] - unlocked, k[2] + charge, k[3] + 1
  k[4], k[5], k[6] = k[4] + tonumber(ARGV[a + 3]), k[5] + tonumber(ARGV[a + 4]), k[6] + charge - tonumber(ARGV[a + 5])
  k[7], k[8] = k[7] + cr, k[8] + cw + cw1h
  if not at then
    local t = redis.call('TIME')
    at = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
  end
  g = g or 1
  local list = events[g]
  if not list then list = {}; events[g] = list end
  list[#list + 1] = '{"type":"charge","hold":' .. cjson.encode(ARGV[a + 1]) .. ',"wallet":'
    .. cjson.encode(ARGV[a + 7]) .. ',"key":' .. int(tonumber(ARGV[a + 8])) .. ',"model":' .. cjson.encode(ARGV[a + 6])
    .. ',"amount":' .. int(charge) .. ',"cost":' .. int(tonumber(ARGV[a + 5])) .. ',"pt":' .. int(tonumber(ARGV[a + 3]))
    .. ',"ct":' .. int(tonumber(ARGV[a + 4])) .. cacheJson(cr, cw, cw1h) .. ',"at":' .. at .. '}'
end
-- Every wallet and key the batch read, written back once (HSET of the changed fields).
local function writeWalletsAndKeys()
  for _, name in ipairs(walletsRead) do
    local w = wallets[name]
    if w.lockedChanged then
      redis.call('HSET', name, 'balance', int(w.balance), 'locked', int(w.locked))
    else
      redis.call('HSET', name, 'balance', int(w.balance))
    end
  end
  for _, name in ipairs(keyOrder) do
    local k, fields = keys[name], {}
    for f = 1, #KEY_FIELDS do
      -- The cache counters (7, 8) only once there is something to count: a key without caching keeps its hash.
      if f <= 6 or k[f] ~= 0 then
        fields[#fields + 1] = KEY_FIELDS[f]
        fields[#fields + 1] = int(k[f])
      end
    end
    redis.call('HSET', name, unpack(fields))
  end
end
-- The charges of the batch's shard `g` (1 when not given) as one entry of its outbox: field 'e', the events
-- separated by commas ('[' .. e .. ']' is a JSON array); none if nothing was charged there.
local function appendCharges(outbox, g)
  local list = events[g or 1]
  if list then redis.call('XADD', outbox, '*', 'e', table.concat(list, ',')) end
end
