package timeline

import "github.com/redis/go-redis/v9"

// The scripts touch only the keys they are given, and each call's keys
// share one Redis Cluster slot: a batch of users of one slot (their inbox
// and held keys carry the user's hash tag), or the shared keys (one tag
// of their own). Work that spans users of many slots is one script per
// slot, pipelined (Server.runScripts), with the shared keys updated in a
// step of their own; the package doc says why that order keeps every
// held user releasable.

// publishScript delivers or holds one post for a batch of users.
//
// KEYS: inbox, held for each user. ARGV: ref ("AUTHOR POST"), max inbox,
// then one mode per user: "a" the author (always delivered), "d" deliver
// (unless the user has a backlog), "h" hold. An inbox or held score is
// one more than that set's newest. Returns one code per user: 0
// delivered, 1 already delivered, 2 held, 3 already held.
//
// It is the publish's cost per follower, so it issues as few commands as
// it can: a follower without a backlog (the common case) costs EXISTS,
// the newest-score ZRANGE, ZADD NX (which also tells a repeat) and the
// trim; a held one ZSCORE, ZRANGE and ZADD NX. A user holding items gets
// new ones held too, so posts reach the inbox in publish order.
var publishScript = redis.NewScript(`
local ref = ARGV[1]
local maxInbox = tonumber(ARGV[2])
local out = {}
local function nextScore(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #top == 0 then return 1 end
  return tonumber(top[2]) + 1
end
for i = 1, #KEYS / 2 do
  local inbox, hk, mode = KEYS[2*i-1], KEYS[2*i], ARGV[2+i]
  local backlog = mode ~= 'h' and redis.call('EXISTS', hk) == 1
  if mode == 'a' or (mode == 'd' and not backlog) then
    if backlog and redis.call('ZSCORE', hk, ref) then
      out[i] = 3
    elseif redis.call('ZADD', inbox, 'NX', nextScore(inbox), ref) == 0 then
      out[i] = 1
    else
      if maxInbox > 0 then
        redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1))
      end
      out[i] = 0
    end
  elseif redis.call('ZSCORE', inbox, ref) then
    out[i] = 1
  elseif redis.call('ZADD', hk, 'NX', nextScore(hk), ref) == 0 then
    out[i] = 3
  else
    out[i] = 2
  end
end
return out
`)

// takeScript starts a release step: it finds users no longer delayed who
// hold items, and takes tokens for them from the cluster-wide bucket.
//
// KEYS: held units (hu), bucket (rl). ARGV: ratio, start (a score in
// [ratio, 1): eligible users from start upwards go first, then those from
// ratio to start), max, rate (items/s), burst (bucket size), need (tokens
// to wait for before a step, at most burst). Returns {budget, wait ms,
// eligible, users...}: eligible is 0 when no user is releasable; wait is
// -1 when the rate is 0 (paused), else how long until the bucket holds
// enough tokens. The budget's tokens are taken; the step gives back what
// it does not move.
var takeScript = redis.NewScript(`
local hu, bk = KEYS[1], KEYS[2]
local ratio, start = ARGV[1], ARGV[2]
local max, rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local need = tonumber(ARGV[6])
if #redis.call('ZRANGEBYSCORE', hu, ratio, '+inf', 'LIMIT', 0, 1) == 0 then
  return {0, 0, 0}
end
if rate <= 0 then
  return {0, -1, 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', bk, 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if tokens == nil then tokens = 0 end
if ts == nil then ts = now end
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
redis.call('HSET', bk, 'tokens', tostring(tokens - budget), 'ts', tostring(now))
redis.call('PEXPIRE', bk, 600000)
local out = {budget, 0, 1}
for _, u in ipairs(users) do out[#out + 1] = u end
return out
`)

// moveScript releases held items of a batch of users into their inboxes.
//
// KEYS: inbox, held for each user. ARGV: max inbox, then one quota per
// user. Each released item gets a fresh inbox score (one more than the
// inbox's newest), so it lands after every cursor handed out. Returns
// three values per user: items moved, items still held, the ref of the
// oldest still held ("" when none).
var moveScript = redis.NewScript(`
local maxInbox = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local inbox, hk, q = KEYS[2*i-1], KEYS[2*i], tonumber(ARGV[1+i])
  local moved = 0
  local refs = redis.call('ZRANGE', hk, 0, q - 1)
  if #refs > 0 then
    local top = redis.call('ZRANGE', inbox, -1, -1, 'WITHSCORES')
    local seq = 0
    if #top > 0 then seq = tonumber(top[2]) end
    for _, ref in ipairs(refs) do
      if redis.call('ZADD', inbox, 'NX', seq + 1, ref) == 1 then
        seq = seq + 1
      end
      redis.call('ZREM', hk, ref)
      moved = moved + 1
    end
    if maxInbox > 0 then
      redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1))
    end
  end
  local left = redis.call('ZCARD', hk)
  local head = ''
  if left > 0 then head = redis.call('ZRANGE', hk, 0, 0)[1] end
  out[#out + 1] = moved
  out[#out + 1] = left
  out[#out + 1] = head
end
return out
`)
