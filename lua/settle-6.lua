--[[
  Post a hold: replace the lock by the actual charge, bump the key's counters and append the charge to the
  outbox. A hold is resolved exactly once; a settle that arrives after the sweeper expired the hold still
  records the charge (the inference happened), and any other repeat is a no-op.

  KEYS[1] wallet hash   KEYS[2] api key hash   KEYS[3] holds zset
  KEYS[4] hold marker   gw:{sNN}:hd:<holdId>   "live|amount|wallet|keyId" → settled (kept ARGV[9] s)
  KEYS[5] outbox stream gw:{sNN}:outbox        one field 'e': the event as a JSON object (see below)
  KEYS[6] shard fence   gw:{sNN}:fence         the ledger epoch while open; 'R:<epoch>' while a rebuild runs

  ARGV[1] hold id   ARGV[2] charge µUSDC   ARGV[3] prompt tokens   ARGV[4] completion tokens
  ARGV[5] provider cost µUSD   ARGV[6] model id   ARGV[7] wallet   ARGV[8] key id   ARGV[9] marker ttl s
  ARGV[10] ledger epoch the caller believes in

  Outbox event: {"type":"charge","hold","wallet","key","model","amount","cost","pt","ct","at"} (at: Redis clock,
  ms). It is JSON so the flusher hands a whole batch to Postgres as one json_to_recordset parameter, unparsed.

  Returns {1, balance_after}           charged (hold posted, or late charge after expiry)
          {0, 'settled' | 'released'}  already resolved; nothing changed
          {0, 'UNKNOWN_HOLD'}
          {0, 'FENCED', fence}         stale epoch or a rebuild runs: nothing changed, retry after it
]]
local fence = redis.call('GET', KEYS[6])
if fence ~= ARGV[10] then return {0, 'FENCED', fence or ''} end
local function whole(v) return string.match(v, '^%d+$') and string.len(v) <= 15 end
if ARGV[1] == '' or not (whole(ARGV[2]) and whole(ARGV[3]) and whole(ARGV[4]) and string.match(ARGV[5], '^%-?%d+$')
  and whole(ARGV[8]) and whole(ARGV[9])) or string.len(ARGV[5]) > 15 or tonumber(ARGV[9]) == 0 then
  return redis.error_reply('settle-6: bad arguments')
end
local id = ARGV[1]
local charge = tonumber(ARGV[2])
local state = redis.call('GET', KEYS[4])
if not state then return {0, 'UNKNOWN_HOLD'} end
local held = 0
if string.sub(state, 1, 5) == 'live|' then
  held = tonumber(string.match(state, '^live|(%-?%d+)|'))
  redis.call('HINCRBY', KEYS[1], 'locked', -held)
  redis.call('ZREM', KEYS[3], id)
elseif state ~= 'expired' then
  return {0, state}
end

local balance = redis.call('HINCRBY', KEYS[1], 'balance', -charge)
-- Six counters read and written in two calls (the script is atomic, so read-modify-write is safe).
local k = redis.call('HMGET', KEYS[2], 'locked', 'spent', 'requests', 'prompt_tokens', 'completion_tokens', 'revenue')
local function int(v) return string.format('%d', v) end
redis.call('HSET', KEYS[2],
  'locked', int((tonumber(k[1]) or 0) - held),
  'spent', int((tonumber(k[2]) or 0) + charge),
  'requests', int((tonumber(k[3]) or 0) + 1),
  'prompt_tokens', int((tonumber(k[4]) or 0) + tonumber(ARGV[3])),
  'completion_tokens', int((tonumber(k[5]) or 0) + tonumber(ARGV[4])),
  'revenue', int((tonumber(k[6]) or 0) + charge - tonumber(ARGV[5])))
redis.call('SET', KEYS[4], 'settled', 'EX', tonumber(ARGV[9]))

local t = redis.call('TIME')
redis.call('XADD', KEYS[5], '*', 'e', '{"type":"charge","hold":' .. cjson.encode(id) .. ',"wallet":' .. cjson.encode(ARGV[7])
  .. ',"key":' .. int(tonumber(ARGV[8])) .. ',"model":' .. cjson.encode(ARGV[6]) .. ',"amount":' .. int(charge)
  .. ',"cost":' .. int(tonumber(ARGV[5])) .. ',"pt":' .. int(tonumber(ARGV[3])) .. ',"ct":' .. int(tonumber(ARGV[4]))
  .. ',"at":' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)) .. '}')
return {1, balance}
