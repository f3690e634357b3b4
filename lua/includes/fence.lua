-- The shard fence: a balance script changes nothing unless the shard's fence holds what the caller believes it
-- holds, `epoch` (ARGV[1] when not given; the ledger epoch while open; 'R:<epoch>' for a rebuild's own writes). A
-- stale epoch, or a rebuild running, refuses the whole call before its first read. `group`: which of the call's
-- shards refused (the batch scripts, whose one call may span several shards on a single Redis), in the reply.
local function fenceRefusal(fenceKey, epoch, group)
  local fence = redis.call('GET', fenceKey)
  if fence ~= (epoch or ARGV[1]) then return {0, 'FENCED', fence or '', group} end
  return nil
end
