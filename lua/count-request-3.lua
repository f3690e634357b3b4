--[[
  Count one request that holds no credit (POST /v1/messages/count_tokens) against its wallet's rate limit, the
  same sliding window and counters reserve-batch uses (so the two kinds of request share one limit), after checking
  that its key is active. A request refused (revoked key, or over the limit) is not counted.

  KEYS[1] api key hash             gw:{sNN}:k:<keyId>        revoked ('0' while active)
  KEYS[2] rate counter, current window    gw:{sNN}:rl:<wallet>:<n>
  KEYS[3] rate counter, previous window   gw:{sNN}:rl:<wallet>:<n-1>
  ARGV[1] rate limit: requests per window
  ARGV[2] window length, ms
  ARGV[3] ms elapsed in the current window (gateway clock, same one that picked the window keys)

  Returns {1, rate_remaining}               counted
          {0, 'UNAUTHORIZED'}               key unknown or revoked
          {0, 'RATE_LIMITED', retry_after_ms}
  Bad arguments: an error reply, nothing changed.
]]
--- @include "includes/numbers"
if not (whole(ARGV[1]) and whole(ARGV[2]) and whole(ARGV[3])) or tonumber(ARGV[2]) == 0 then
  return redis.error_reply('count-request-3: bad arguments')
end
if redis.call('HGET', KEYS[1], 'revoked') ~= '0' then return {0, 'UNAUTHORIZED'} end
local limit, window, elapsed = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('MGET', KEYS[2], KEYS[3])
local weighted = math.floor((tonumber(v[2]) or 0) * (window - elapsed) / window) + (tonumber(v[1]) or 0)
if weighted >= limit then return {0, 'RATE_LIMITED', window - elapsed} end
if redis.call('INCR', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], window * 2) end
return {1, limit - weighted - 1}
