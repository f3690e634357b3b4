--[[
  Reserve credit for one inference request: the only gate on the chat path.
  Checks, in this order, and changes nothing unless all pass (a rate-limit pass is still counted):
  the ledger fence (no rebuild running, the caller's epoch current), arguments well formed, key not revoked, hold id not used before, per-wallet sliding-window rate limit, key budget, wallet available
  credit. Then it opens a hold that settle-6 / release-6 resolve exactly once, or the sweeper expires.
  Every redis.call costs ~2 µs inside a script, two requests' worth of Redis CPU per chat call: the hold lives in
  one key (its marker) and counters are read and written in one call each, not one HINCRBY per field.

  KEYS[1] wallet hash           gw:{sNN}:w:<wallet>      balance, locked
  KEYS[2] api key hash          gw:{sNN}:k:<keyId>       revoked, budget, spent, locked, counters
  KEYS[3] holds zset            gw:{sNN}:holds           holdId -> expiry (ms, Redis clock), for the sweeper
  KEYS[4] hold marker           gw:{sNN}:hd:<holdId>     "live|amount|wallet|keyId", then settled | released | expired
  KEYS[5] rate counter, current window    gw:{sNN}:rl:<wallet>:<n>
  KEYS[6] rate counter, previous window   gw:{sNN}:rl:<wallet>:<n-1>
  KEYS[7] shard fence           gw:{sNN}:fence           the ledger epoch while open; 'R:<epoch>' while a rebuild runs

  ARGV[1] hold id (unique per request; a retry with the same id reserves nothing twice)
  ARGV[2] amount to hold, µUSDC
  ARGV[3] rate limit: requests per window
  ARGV[4] window length, ms
  ARGV[5] ms elapsed in the current window (gateway clock, same one that picked the window keys)
  ARGV[6] hold lifetime, ms
  ARGV[7] "wallet|keyId" of the hold
  ARGV[8] ledger epoch the caller believes in

  Returns
    {1, available_after, rate_remaining}   held (or already held under this id: rate_remaining 0)
    {0, 'UNAUTHORIZED'}                    key unknown or revoked
    {0, 'HOLD_RESOLVED'}                   this hold id was settled, released or expired before
    {0, 'RATE_LIMITED', retry_after_ms}
    {0, 'KEY_BUDGET_EXCEEDED', budget_left}
    {0, 'INSUFFICIENT_BALANCE', available}
    {0, 'FENCED', fence}                   stale epoch or a rebuild runs: nothing changed, retry after it
]]
local fence = redis.call('GET', KEYS[7])
if fence ~= ARGV[8] then return {0, 'FENCED', fence or ''} end
local function whole(v) return string.match(v, '^%d+$') and string.len(v) <= 15 end
if ARGV[1] == '' or not (whole(ARGV[2]) and whole(ARGV[3]) and whole(ARGV[4]) and whole(ARGV[5]) and whole(ARGV[6]))
  or tonumber(ARGV[4]) == 0 then
  return redis.error_reply('reserve-7: bad arguments')
end
local id = ARGV[1]
local amount = tonumber(ARGV[2])

local key = redis.call('HMGET', KEYS[2], 'revoked', 'budget', 'spent', 'locked')
if key[1] ~= '0' then return {0, 'UNAUTHORIZED'} end

local marker = redis.call('GET', KEYS[4])
if marker then
  if string.sub(marker, 1, 5) ~= 'live|' then return {0, 'HOLD_RESOLVED'} end
  local w = redis.call('HMGET', KEYS[1], 'balance', 'locked')
  return {1, (tonumber(w[1]) or 0) - (tonumber(w[2]) or 0), 0}
end

local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local elapsed = tonumber(ARGV[5])
local counts = redis.call('MGET', KEYS[5], KEYS[6])
local weighted = math.floor((tonumber(counts[2]) or 0) * (window - elapsed) / window) + (tonumber(counts[1]) or 0)
if weighted >= limit then
  return {0, 'RATE_LIMITED', window - elapsed}
end
if redis.call('INCR', KEYS[5]) == 1 then redis.call('PEXPIRE', KEYS[5], window * 2) end

if key[2] and key[2] ~= '' then
  local left = tonumber(key[2]) - (tonumber(key[3]) or 0) - (tonumber(key[4]) or 0)
  if left < amount then return {0, 'KEY_BUDGET_EXCEEDED', left} end
end

local w = redis.call('HMGET', KEYS[1], 'balance', 'locked')
local available = (tonumber(w[1]) or 0) - (tonumber(w[2]) or 0)
if available < amount then return {0, 'INSUFFICIENT_BALANCE', available} end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HINCRBY', KEYS[1], 'locked', amount)
redis.call('HINCRBY', KEYS[2], 'locked', amount)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
redis.call('SET', KEYS[4], 'live|' .. ARGV[2] .. '|' .. ARGV[7])
return {1, available - amount, limit - weighted - 1}
