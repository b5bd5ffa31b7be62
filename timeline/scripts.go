package timeline

import "github.com/redis/go-redis/v9"

// publishScript fans one post out to a batch of users.
//
// ARGV: prefix, ref ("AUTHOR POST"), posted-at ms, max inbox, then
// triples (user, mode, hash unit). Mode "a" is the author (always
// delivered), "d" deliver (unless the user has a backlog), "h" hold. A user who already has the item, in the inbox or held, is only
// counted. Returns {delivered, held}.
var publishScript = redis.NewScript(`
local p = ARGV[1]
local ref = ARGV[2]
local posted = tonumber(ARGV[3])
local maxInbox = tonumber(ARGV[4])
local delivered, held = 0, 0
for i = 5, #ARGV, 3 do
  local u, mode, unit = ARGV[i], ARGV[i+1], ARGV[i+2]
  local inbox = p .. 'in:' .. u
  local hk = p .. 'h:' .. u
  if redis.call('ZSCORE', inbox, ref) then
    delivered = delivered + 1
  elseif redis.call('ZSCORE', hk, ref) then
    held = held + 1
  else
    local seq = redis.call('INCR', p .. 'seq')
    if mode == 'a' or (mode == 'd' and redis.call('EXISTS', hk) == 0) then
      redis.call('ZADD', inbox, seq, ref)
      if maxInbox > 0 then
        redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1))
      end
      delivered = delivered + 1
    else
      redis.call('ZADD', hk, seq, ref)
      redis.call('ZADD', p .. 'hu', unit, u)
      redis.call('ZADD', p .. 'ha', 'LT', posted, u)
      redis.call('INCR', p .. 'hc')
      held = held + 1
    end
  end
end
return {delivered, held}
`)

// releaseScript releases up to max held items of users no longer delayed,
// within the cluster-wide token bucket.
//
// ARGV: prefix, ratio, start (a score in [ratio, 1): eligible users from
// start upwards go first, then those from ratio to start), max, rate
// (items/s), burst (bucket size), need (tokens to wait for before a step,
// at most burst), max inbox. Returns {moved, wait ms,
// eligible}: eligible is 0 when no user is releasable; wait is -1 when the
// rate is 0 (paused), else how long until the bucket holds enough tokens.
var releaseScript = redis.NewScript(`
local p = ARGV[1]
local ratio, start = ARGV[2], ARGV[3]
local max, rate, burst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local need, maxInbox = tonumber(ARGV[7]), tonumber(ARGV[8])
local hu = p .. 'hu'
if #redis.call('ZRANGEBYSCORE', hu, ratio, '+inf', 'LIMIT', 0, 1) == 0 then
  return {0, 0, 0}
end
if rate <= 0 then
  return {0, -1, 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bk = p .. 'rl'
local b = redis.call('HMGET', bk, 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if tokens == nil or ts == nil then
  tokens, ts = 0, now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
end
if tokens < need then
  redis.call('HSET', bk, 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', bk, 600000)
  return {0, math.ceil((need - tokens) * 1000 / rate), 1}
end
local budget = math.min(math.floor(tokens), max)
local users = redis.call('ZRANGEBYSCORE', hu, start, '+inf', 'LIMIT', 0, budget)
if #users < budget and start ~= ratio then
  local more = redis.call('ZRANGEBYSCORE', hu, ratio, '(' .. start, 'LIMIT', 0, budget - #users)
  for _, u in ipairs(more) do users[#users + 1] = u end
end
local moved = 0
for _, u in ipairs(users) do
  if moved >= budget then break end
  local hk = p .. 'h:' .. u
  local inbox = p .. 'in:' .. u
  local refs = redis.call('ZRANGE', hk, 0, budget - moved - 1)
  for _, ref in ipairs(refs) do
    local seq = redis.call('INCR', p .. 'seq')
    redis.call('ZADD', inbox, 'NX', seq, ref)
    redis.call('ZREM', hk, ref)
    moved = moved + 1
  end
  if maxInbox > 0 then
    redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1))
  end
  local head = redis.call('ZRANGE', hk, 0, 0)
  if #head == 0 then
    redis.call('ZREM', hu, u)
    redis.call('ZREM', p .. 'ha', u)
  else
    local at = tonumber(redis.call('HGET', p .. 'p:' .. head[1], 't')) or now
    redis.call('ZADD', p .. 'ha', at, u)
  end
end
if moved > 0 then
  redis.call('DECRBY', p .. 'hc', moved)
  redis.call('INCRBY', p .. 'rel', moved)
end
tokens = tokens - moved
redis.call('HSET', bk, 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', bk, 600000)
return {moved, 0, 1}
`)
