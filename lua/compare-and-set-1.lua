--[[
  Change a key only while it still holds the value the caller expects. The rebuild lock is renewed and released
  only by its owner (its token), and a shard's fence is opened only from the closed state this rebuild set, so a
  rebuild that lost its lock can neither release another's lock nor open fences under it.

  KEYS[1] the key          gw:ledger:rebuilding (owner token), or gw:{sNN}:fence ('R:<epoch>' -> '<epoch>')
  ARGV[1] expected value
  ARGV[2] new value; '' deletes the key
  ARGV[3] lifetime of the new value in ms; '' for none

  Returns 1  changed
          0  the key held something else (or nothing); nothing changed
]]
if ARGV[3] ~= '' and not string.match(ARGV[3], '^[1-9]%d*$') then
  return redis.error_reply('compare-and-set-1: bad lifetime')
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
elseif ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
