-- The shard fence: a balance script changes nothing unless the shard's fence holds what the caller believes it
-- holds, always ARGV[1] (the ledger epoch while open; 'R:<epoch>' for a rebuild's own writes). A stale epoch, or a
-- rebuild running, refuses the whole call before its first read.
local function fenceRefusal(fenceKey)
  local fence = redis.call('GET', fenceKey)
  if fence ~= ARGV[1] then return {0, 'FENCED', fence or ''} end
  return nil
end
