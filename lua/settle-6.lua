--[[
  Post a hold: replace the lock by the actual charge, bump the key's counters and append the charge to the
  outbox. A hold is resolved exactly once; a settle that arrives after the sweeper expired the hold still
  records the charge (the inference happened), and any other repeat is a no-op.

  KEYS[1] wallet hash        KEYS[2] api key hash     KEYS[3] holds zset   KEYS[4] hold details hash
  KEYS[5] resolution marker  gw:{sNN}:hd:<holdId>    (settled | released | expired, kept ARGV[9] s)
  KEYS[6] outbox stream      gw:{sNN}:outbox      one field 'e': the event as a JSON object (see below)

  ARGV[1] hold id   ARGV[2] charge µUSDC   ARGV[3] prompt tokens   ARGV[4] completion tokens
  ARGV[5] provider cost µUSD   ARGV[6] model id   ARGV[7] wallet   ARGV[8] key id   ARGV[9] marker ttl s

  Outbox event: {"type":"charge","hold","wallet","key","model","amount","cost","pt","ct","at"} (at: Redis clock,
  ms). It is JSON so the flusher hands a whole batch to Postgres as one json_to_recordset parameter, unparsed.

  Returns {1, balance_after}      charged (hold posted, or late charge after expiry)
          {0, 'settled' | 'released'}  already resolved; nothing changed
          {0, 'UNKNOWN_HOLD'}
]]
local id = ARGV[1]
local charge = tonumber(ARGV[2])
local held = redis.call('HGET', KEYS[4], id)
if held then
  local amount = tonumber(string.match(held, '^(%-?%d+)|'))
  redis.call('HINCRBY', KEYS[1], 'locked', -amount)
  redis.call('HINCRBY', KEYS[2], 'locked', -amount)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
else
  local state = redis.call('GET', KEYS[5])
  if not state then return {0, 'UNKNOWN_HOLD'} end
  if state ~= 'expired' then return {0, state} end
end

local balance = redis.call('HINCRBY', KEYS[1], 'balance', -charge)
redis.call('HINCRBY', KEYS[2], 'spent', charge)
redis.call('HINCRBY', KEYS[2], 'requests', 1)
redis.call('HINCRBY', KEYS[2], 'prompt_tokens', tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[2], 'completion_tokens', tonumber(ARGV[4]))
redis.call('HINCRBY', KEYS[2], 'revenue', charge - tonumber(ARGV[5]))
redis.call('SET', KEYS[5], 'settled', 'EX', tonumber(ARGV[9]))

local t = redis.call('TIME')
local function int(v) return string.format('%d', tonumber(v)) end
redis.call('XADD', KEYS[6], '*', 'e', '{"type":"charge","hold":' .. cjson.encode(id) .. ',"wallet":' .. cjson.encode(ARGV[7])
  .. ',"key":' .. int(ARGV[8]) .. ',"model":' .. cjson.encode(ARGV[6]) .. ',"amount":' .. int(charge)
  .. ',"cost":' .. int(ARGV[5]) .. ',"pt":' .. int(ARGV[3]) .. ',"ct":' .. int(ARGV[4])
  .. ',"at":' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)) .. '}')
return {1, balance}
