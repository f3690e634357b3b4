--[[
  Open, resize, renew or close a credit lease: a hold one gateway process keeps on part of a wallet's available
  credit (and so of its key's budget) and on part of the wallet's rate window, so it can admit requests in memory
  instead of calling reserve-batch for each (src/ledger/leases.ts). A lease is a hold like any other: its marker
  "live|amount|wallet|keyId" says what it locks now, it sits in the holds zset with an expiry, the audit and a
  rebuild count it as a live hold, and the sweeper expires a crashed process's lease with release-6. Charges of the
  requests admitted under it go through settle-leased-batch, which moves each charge from the lease's lock to the
  balance. Idempotent by lease id: a resolved lease is never reopened.

  KEYS[1] wallet hash    gw:{sNN}:w:<wallet>    balance, locked
  KEYS[2] api key hash   gw:{sNN}:k:<keyId>     revoked, budget, spent, locked
  KEYS[3] holds zset     gw:{sNN}:holds         leaseId -> expiry (ms, Redis clock), for the sweeper
  KEYS[4] lease marker   gw:{sNN}:hd:<leaseId>  "live|amount|wallet|keyId", then released | expired (kept ARGV[12] s)
  KEYS[5] rate counter, current window   gw:{sNN}:rl:<wallet>:<n>
  KEYS[6] rate counter, previous window  gw:{sNN}:rl:<wallet>:<n-1>
  KEYS[7] outbox stream  gw:{sNN}:outbox        a close appends {"type":"release",...} as release-6 does
  KEYS[8] shard fence    gw:{sNN}:fence

  ARGV[1] ledger epoch the caller believes in   ARGV[2] lease id   ARGV[3] "wallet|keyId"
  ARGV[4] target: µUSDC the lease should lock after this call (0 with a floor of 0 closes it)
  ARGV[5] floor: µUSDC the caller's admitted requests may still need; never given back by this call
  ARGV[6] share, per mille: a lease grows to at most this share of (what is left outside every lock + its own
          lock), what is left being the wallet's available credit or, if less, the key's budget: other processes,
          and requests served without a lease, always find the rest of either
  ARGV[7] least: a lease that is not open yet opens only if it can lock at least this much
  ARGV[8] rate slots wanted (requests the caller may admit in the current window)
  ARGV[9] rate slots given back: unused slots this caller took earlier in the same (current) window
  ARGV[10] rate limit: requests per window   ARGV[11] window length, ms
  ARGV[12] ms elapsed in the current window (gateway clock, the one that picked KEYS[5] and KEYS[6])
  ARGV[13] lease lifetime, ms: the expiry becomes Redis now + this   ARGV[14] resolved-marker ttl, s

  Returns {1, locked, available_after, slots, before, rate_left}  the lease now locks `locked` (0: not open, or
                      closed), it locked `before` when this call ran, the wallet has `available_after` left outside
                      it, `slots` were granted, and the window has `rate_left` requests left beyond them
          {0, 'UNAUTHORIZED', locked, before}  key unknown or revoked: it does not grow and gets no slots (shrinks
                      or closes as asked)
          {0, 'HOLD_RESOLVED'}         this lease id was expired or closed before: take a new id
          {0, 'FENCED', fence}         stale epoch or a rebuild runs: nothing changed, retry after it
  Bad arguments: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
local refused = fenceRefusal(KEYS[8])
if refused then return refused end
for i = 4, 14 do
  if not whole(ARGV[i]) then return redis.error_reply('lease-8: bad arguments') end
end
if ARGV[2] == '' or tonumber(ARGV[6]) > 1000 or tonumber(ARGV[11]) == 0 or tonumber(ARGV[14]) == 0 then
  return redis.error_reply('lease-8: bad arguments')
end

local target, floor, share, least = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local marker = redis.call('GET', KEYS[4])
local now_locked = 0
if marker then
  local amount = string.match(marker, '^live|(%d+)|')
  if not amount then return {0, 'HOLD_RESOLVED'} end
  now_locked = tonumber(amount)
end
-- The caller counts a request until it has seen the request's settle; one that already ran here took its part.
floor = math.min(floor, now_locked)

local k = redis.call('HMGET', KEYS[2], 'revoked', 'budget', 'spent', 'locked')
local active = k[1] == '0'
local w = redis.call('HMGET', KEYS[1], 'balance', 'locked')
local balance, wallet_locked = tonumber(w[1]) or 0, tonumber(w[2]) or 0
local available = balance - wallet_locked

-- What is left outside every lock, of the wallet and of the key's budget: negative when either is overdrawn (a
-- charge beyond its hold, a budget lowered), and then the lease gives up the difference, down to its floor.
local left = available
if k[2] and k[2] ~= '' then left = math.min(left, tonumber(k[2]) - (tonumber(k[3]) or 0) - (tonumber(k[4]) or 0)) end
local locked = math.min(target, now_locked)
if left < 0 then locked = math.min(locked, now_locked + left) end
if active and target > now_locked and left > 0 then
  -- Growth comes out of what is left, up to the share of the credit outside other locks: of the wallet, or of
  -- the key's budget when that is less (a budget's share taken of the wallet let one lease lock all of it).
  local room = math.min(left, math.floor((left + now_locked) * share / 1000) - now_locked)
  if room > 0 then locked = math.min(target, now_locked + room) end
end
locked = math.max(floor, locked)
if not marker and locked < least then locked = 0 end

local delta = locked - now_locked
if delta ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'locked', delta)
  redis.call('HINCRBY', KEYS[2], 'locked', delta)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if locked > 0 then
  redis.call('SET', KEYS[4], 'live|' .. int(locked) .. '|' .. ARGV[3])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[13]), ARGV[2])
elseif marker then
  redis.call('SET', KEYS[4], 'released', 'EX', tonumber(ARGV[14]))
  redis.call('ZREM', KEYS[3], ARGV[2])
  local wallet, keyId = string.match(ARGV[3], '^([^|]*)|(%d+)$')
  redis.call('XADD', KEYS[7], '*', 'e', '{"type":"release","hold":' .. cjson.encode(ARGV[2]) .. ',"wallet":'
    .. cjson.encode(wallet or '') .. ',"key":' .. int(tonumber(keyId) or 0) .. ',"amount":' .. int(now_locked)
    .. ',"at":' .. int(now) .. '}')
end

-- The rate window: unused slots of this window come back first, then new ones are granted like reserve-batch's
-- single requests (sliding window: the previous window weighs by the share of it still inside the window).
local limit, window, elapsed = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local back = tonumber(ARGV[9])
local cur = tonumber(redis.call('GET', KEYS[5]) or '0')
if back > 0 and cur > 0 then
  back = math.min(back, cur)
  cur = redis.call('DECRBY', KEYS[5], back)
end
local prev = tonumber(redis.call('GET', KEYS[6]) or '0')
local weighted = math.floor(prev * (window - elapsed) / window) + cur
local slots = 0
if active and locked > 0 and tonumber(ARGV[8]) > 0 then
  slots = math.max(0, math.min(tonumber(ARGV[8]), limit - weighted))
  if slots > 0 and redis.call('INCRBY', KEYS[5], slots) == slots then redis.call('PEXPIRE', KEYS[5], window * 2) end
end

if not active then return {0, 'UNAUTHORIZED', locked, now_locked} end
return {1, locked, balance - wallet_locked - delta, slots, now_locked, math.max(0, limit - weighted - slots)}
