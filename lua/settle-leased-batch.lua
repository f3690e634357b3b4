--[[
  Charge a batch of requests that were admitted under credit leases (lease-8), of one shard (variadic: 2 keys of
  the shard, then 4 per item). Per item: the charge comes off the balance and out of the lease's lock (the lease
  covered the request, so what it charged is no longer locked), the key's counters move, and the charge goes to the
  outbox, exactly as settle-batch does for a hold of its own. Each charge has its own id, posted exactly once (its
  marker); a repeat is a no-op. A lease already expired or closed still takes the charge (the inference happened)
  with nothing left to unlock, as settle-batch does after the sweeper. Items are applied in order, each seeing the
  ones before it, so a batch equals the same calls one by one. One XADD per batch. The holds zset is not touched:
  a lease leaves it when its owner closes it or the sweeper expires it.

  KEYS[1] outbox stream  gw:{sNN}:outbox  one field 'e' per entry: the batch's charge events, as in settle-batch
  KEYS[2] shard fence    gw:{sNN}:fence
  then for item i = 1..n, at b = 2 + 4 * (i - 1):
  KEYS[b+1] wallet hash  KEYS[b+2] api key hash
  KEYS[b+3] charge marker gw:{sNN}:hd:<chargeId>  absent → settled (kept ARGV[2] s)
  KEYS[b+4] lease marker  gw:{sNN}:hd:<leaseId>   "live|amount|wallet|keyId": amount shrinks by what it covered

  ARGV[1] ledger epoch the caller believes in   ARGV[2] marker ttl s
  then for item i, at a = 2 + 12 * (i - 1):
  ARGV[a+1] charge id   ARGV[a+2] charge µUSDC   ARGV[a+3] prompt tokens   ARGV[a+4] completion tokens
  ARGV[a+5] provider cost µUSD   ARGV[a+6] model id   ARGV[a+7] wallet   ARGV[a+8] key id
  ARGV[a+9] held µUSDC: what the request held of the lease; the lock it gives up is at most this (an overrun
            beyond it is charged to the balance, never taken from what the lease covers for other requests)
  ARGV[a+10] cache-read tokens   ARGV[a+11] 5-minute cache-write tokens   ARGV[a+12] 1-hour cache-write tokens
            (of the prompt tokens, as in settle-batch)

  Returns {0, 'FENCED', fence}  stale epoch or a rebuild runs: nothing changed for the whole batch, retry after it
          {1, item_1, ..., item_n}, each item one of
    {1, balance_after, covered}  charged; `covered` µUSDC of it came out of the lease's lock
    {0, 'settled'}       this charge id was posted before; nothing changed
    {0, 'UNKNOWN_HOLD'}  Redis does not know the lease (it lost its data): nothing changed
  Bad arguments anywhere: an error reply, nothing changed.
]]
--- @include "includes/fence"
--- @include "includes/numbers"
--- @include "includes/wallets"
--- @include "includes/charges"
local refused = fenceRefusal(KEYS[2])
if refused then return refused end
local n = (#KEYS - 2) / 4
local valid = n >= 1 and n == math.floor(n) and #ARGV == 2 + 12 * n and whole(ARGV[2]) and tonumber(ARGV[2]) ~= 0
for i = 1, valid and n or 0 do
  local a = 2 + 12 * (i - 1)
  if ARGV[a + 1] == '' or not (whole(ARGV[a + 2]) and whole(ARGV[a + 3]) and whole(ARGV[a + 4])
    and string.match(ARGV[a + 5], '^%-?%d+$') and string.len(ARGV[a + 5]) <= 15 and whole(ARGV[a + 8])
    and whole(ARGV[a + 9]) and whole(ARGV[a + 10]) and whole(ARGV[a + 11]) and whole(ARGV[a + 12])) then
    valid = false
  end
end
if not valid then return redis.error_reply('settle-leased-batch: bad arguments') end

local markers, leases = {}, {}
local posted, leaseOrder = {}, {}
-- A lease's marker, parsed once per batch: {amount, rest} while live, {resolved = true} after, false if absent.
local function lease(name)
  local l = leases[name]
  if l == nil then
    local v = redis.call('GET', name)
    if not v then
      l = false
    else
      local amount, rest = string.match(v, '^live|(%d+)|(.*)$')
      l = amount and {amount = tonumber(amount), rest = rest} or {resolved = true}
    end
    leases[name] = l
  end
  return l
end

local results = {1}
for i = 1, n do
  local b, a = 2 + 4 * (i - 1), 2 + 12 * (i - 1)
  local id, charge = ARGV[a + 1], tonumber(ARGV[a + 2])
  local name = KEYS[b + 3]
  if markers[name] == nil then markers[name] = redis.call('GET', name) or false end
  local l = lease(KEYS[b + 4])
  if markers[name] then
    results[i + 1] = {0, markers[name]}
  elseif not l then
    results[i + 1] = {0, 'UNKNOWN_HOLD'}
  else
    local covered = 0
    local w = wallet(KEYS[b + 1])
    if not l.resolved then
      covered = math.min(charge, tonumber(ARGV[a + 9]), l.amount)
      if covered > 0 and not l.dirty then l.dirty = true; leaseOrder[#leaseOrder + 1] = KEYS[b + 4] end
      l.amount = l.amount - covered
      w.locked, w.lockedChanged = w.locked - covered, true
    end
    w.balance = w.balance - charge
    chargeKey(KEYS[b + 2], a, covered, a + 10)
    markers[name] = 'settled'
    posted[#posted + 1] = name
    results[i + 1] = {1, w.balance, covered}
  end
end

writeWalletsAndKeys()
-- A lease whose lock reached 0 stays open (live|0): its owner closes it, or the sweeper expires it.
for _, name in ipairs(leaseOrder) do redis.call('SET', name, 'live|' .. int(leases[name].amount) .. '|' .. leases[name].rest) end
appendCharges(KEYS[1])
local ttl = tonumber(ARGV[2])
for _, name in ipairs(posted) do redis.call('SET', name, 'settled', 'EX', ttl) end
return results
