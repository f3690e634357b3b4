--[[
  Post a batch of holds of one shard (variadic: 3 keys of the shard, then 3 per item; a single settle is a batch
  of one): per item, replace the lock by the actual charge, bump the key's counters and append the charge to the
  outbox. A hold is resolved exactly once; a settle that arrives after the sweeper expired the hold still records
  the charge (the inference happened), and any other repeat is a no-op. Items are applied in order, each seeing
  the ones before it (a hold id twice in one batch charges once), so a batch equals the same calls one by one.
  Every wallet, key and marker is read once per batch and written once at the end (HSET of the changed fields,
  one ZREM); TIME once. One XADD per batch: its entry holds every charge of the batch.

  KEYS[1] holds zset     gw:{sNN}:holds
  KEYS[2] outbox stream  gw:{sNN}:outbox       one field 'e' per entry: the batch's charge events as JSON objects
                                               separated by commas (see below), so '[' .. e .. ']' is a JSON array
  KEYS[3] shard fence    gw:{sNN}:fence        the ledger epoch while open; 'R:<epoch>' while a rebuild runs
  then for item i = 1..n, at b = 3 + 3 * (i - 1):
  KEYS[b+1] wallet hash  KEYS[b+2] api key hash
  KEYS[b+3] hold marker  gw:{sNN}:hd:<holdId>  "live|amount|wallet|keyId" → settled (kept ARGV[2] s)

  ARGV[1] ledger epoch the caller believes in   ARGV[2] marker ttl s
  then for item i, at a = 2 + 11 * (i - 1):
  ARGV[a+1] hold id   ARGV[a+2] charge µUSDC   ARGV[a+3] prompt tokens   ARGV[a+4] completion tokens
  ARGV[a+5] provider cost µUSD   ARGV[a+6] model id   ARGV[a+7] wallet   ARGV[a+8] key id
  ARGV[a+9] cache-read tokens   ARGV[a+10] 5-minute cache-write tokens   ARGV[a+11] 1-hour cache-write tokens
            (of the prompt tokens; the key's cached_prompt_tokens and cache_write_tokens counters add them)

  Outbox event: {"type":"charge","hold","wallet","key","model","amount","cost","pt","ct","cr","cw","cw1h","at"} (at:
  Redis clock, ms; cr, cw, cw1h: the cache split, only when one of them is not 0). It is JSON so the flusher hands its entries to Postgres as one json_to_recordset parameter,
  unparsed.

  Returns {0, 'FENCED', fence}  stale epoch or a rebuild runs: nothing changed for the whole batch, retry after it
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
local refused = fenceRefusal(KEYS[3])
if refused then return refused end
local n = (#KEYS - 3) / 3
local valid = n >= 1 and n == math.floor(n) and #ARGV == 2 + 11 * n and whole(ARGV[2]) and tonumber(ARGV[2]) ~= 0
for i = 1, valid and n or 0 do
  local a = 2 + 11 * (i - 1)
  if ARGV[a + 1] == '' or not (whole(ARGV[a + 2]) and whole(ARGV[a + 3]) and whole(ARGV[a + 4])
    and string.match(ARGV[a + 5], '^%-?%d+$') and string.len(ARGV[a + 5]) <= 15 and whole(ARGV[a + 8])
    and whole(ARGV[a + 9]) and whole(ARGV[a + 10]) and whole(ARGV[a + 11])) then
    valid = false
  end
end
if not valid then return redis.error_reply('settle-batch: bad arguments') end

-- Markers read once per batch, by key name (wallets and keys: the includes); written back once at the end.
local markers = {}
local posted, zrem = {}, {}
local results = {1}
for i = 1, n do
  local b, a = 3 + 3 * (i - 1), 2 + 11 * (i - 1)
  local id, charge = ARGV[a + 1], tonumber(ARGV[a + 2])
  local name = KEYS[b + 3]
  if markers[name] == nil then markers[name] = redis.call('GET', name) end
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
      zrem[#zrem + 1] = id
    end
    w.balance = w.balance - charge
    chargeKey(KEYS[b + 2], a, held, a + 9)
    markers[name] = 'settled'
    posted[#posted + 1] = name
    results[i + 1] = {1, w.balance}
  end
end

writeWalletsAndKeys()
if #zrem > 0 then redis.call('ZREM', KEYS[1], unpack(zrem)) end
appendCharges(KEYS[2])
local ttl = tonumber(ARGV[2])
for _, name in ipairs(posted) do redis.call('SET', name, 'settled', 'EX', ttl) end
return results
