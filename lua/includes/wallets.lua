-- The wallet hashes a batch touches, each read once (HMGET balance, locked) and kept by key name, so the items of
-- one wallet see each other's changes; `walletsRead` lists them in first-read order for the write back at the end.
local wallets, walletsRead = {}, {}
local function wallet(name)
  local w = wallets[name]
  if not w then
    local v = redis.call('HMGET', name, 'balance', 'locked')
    w = {balance = tonumber(v[1]) or 0, locked = tonumber(v[2]) or 0}
    wallets[name] = w
    walletsRead[#walletsRead + 1] = name
  end
  return w
end
