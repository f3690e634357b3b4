--[[
  Read one shard's small, mutable books in one atomic step, for `admin audit`: balances, key counters and live
  holds as of one instant, with how many credits were applied and where the outbox ended at that instant, so
  "locked = sum of live holds" and "balance = credits - charges (flushed or still in the outbox)" can be checked
  exactly while the gateway serves. The outbox and the applied credits, which can be large, are read in pages
  after it (src/store/auditRedis.ts says why that is still the same instant). Writes nothing.

  KEYS[1] holds zset        gw:{sNN}:holds      holdId -> expiry
  KEYS[2] outbox stream     gw:{sNN}:outbox     ledger events not yet (known to be) in Postgres
  KEYS[3] applied credits   gw:{sNN}:credited   credit id -> amount
  then ARGV[1] wallet hashes (gw:{sNN}:w:<wallet>), ARGV[2] api key hashes (gw:{sNN}:k:<keyId>), and the hold
  markers (gw:{sNN}:hd:<holdId>) of the holds the caller saw in KEYS[1]: every key comes through KEYS.

  ARGV[1] number of wallet hashes   ARGV[2] number of api key hashes

  Returns {now_ms, wallets, keys, markers, holds, credited, outbox_entries, outbox_last}
    now_ms    Redis clock (settle-batch's "at" clock): outbox events at or after it are not in this read
    wallets   per wallet hash {balance, locked}
    keys      per key hash {revoked, budget, spent, locked, requests, prompt_tokens, completion_tokens, revenue}
    markers   per hold marker its value ("live|amount|wallet|keyId", a resolved state, or nil)
    holds     members of KEYS[1]; one without a marker in KEYS means a hold opened since the caller listed
              them, and the caller reads again
    credited        HLEN of KEYS[3]
    outbox_entries  XLEN of KEYS[2]
    outbox_last     id of the outbox's last entry ('' when empty): entries after it were added after this read
]]
local nWallets = tonumber(ARGV[1])
local nKeys = tonumber(ARGV[2])
if not nWallets or not nKeys or nWallets < 0 or nKeys < 0 or 3 + nWallets + nKeys > #KEYS then
  return redis.error_reply('ERR audit-3: wallet and key counts do not match KEYS')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local wallets, keys, markers = {}, {}, {}
for i = 4, 3 + nWallets do
  wallets[#wallets + 1] = redis.call('HMGET', KEYS[i], 'balance', 'locked')
end
for i = 4 + nWallets, 3 + nWallets + nKeys do
  keys[#keys + 1] = redis.call('HMGET', KEYS[i], 'revoked', 'budget', 'spent', 'locked', 'requests',
    'prompt_tokens', 'completion_tokens', 'revenue')
end
for i = 4 + nWallets + nKeys, #KEYS do
  markers[#markers + 1] = redis.call('GET', KEYS[i])
end

local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
return {
  string.format('%d', now), wallets, keys, markers,
  redis.call('ZRANGE', KEYS[1], 0, -1),
  redis.call('HLEN', KEYS[3]),
  redis.call('XLEN', KEYS[2]),
  last and last[1] or '',
}
