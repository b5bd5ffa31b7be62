package timeline

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts touch only the keys they are given, and each call's keys
// share one Redis Cluster slot: a batch of users of one slot (their inbox
// and held keys carry the user's hash tag) with that slot's sequence
// counter, or the shared keys (one tag of their own). Work that spans users of many slots is one script per
// slot, pipelined (Server.runScripts), with the shared keys updated in a
// step of their own; the package doc says why that order keeps every
// held user releasable.

// publishScript delivers or holds one post for a batch of users.
//
// KEYS: the slot's sequence counter, its duplicate marks (dupMarks), on
// one server only its held count, the shared held item count and the
// oldest-held index (hc, ha: a Redis Cluster keeps no slot count, see
// below, and hc and ha are in another slot), then the n users' inboxes, then the held sets of the users to
// hold (mode "h", who come last). ARGV: ref ("AUTHOR POST"), max inbox, the
// sequence floor (the caller's clock in µs), the users' modes as one
// string of n letters: "a" the author (always delivered), "d" deliver
// (unless the user has a backlog), "h" hold; ARGV[5] "1": a first
// publish (the post record was new), so no user's inbox can hold the
// post yet unless a duplicate publish marked it (see deliverGroup) and
// the inboxes are not asked; ARGV[6] the key prefix (Config.KeyPrefix),
// from which the script names the other users' held sets (same hash tag
// as their inbox: the same slot); ARGV[7] "1": one server, KEYS[3..5]
// are the slot's held count, hc and ha; ARGV[8] the lowest sequence
// number a retry looks through an inbox down to (retrySince); ARGV[9]
// the post record's time (ms). On one server the script adds the items
// it held to hc, and puts a user to hold into ha (ZADD LT, the post's
// time) where the hold is the user's first held item (RPUSH answered 1:
// a user already holding items is in ha with an older time, see the
// package doc), or where the publish is not a first one (a retry may
// hold a post older than the user's others); the user's ID is the
// inbox key's tag unescaped (userTag). Returns one digit per user, as
// one string: 0 delivered, 1 already delivered, 2 held, 3 already held.
//
// It is the publish's cost per follower, so it issues as few commands as
// it can, and its arguments and reply are a few bytes a user. Every item
// it adds, to an inbox or a held set, gets one score: the slot's next
// sequence number (one INCR of the counter a script), so no user's set
// is read for its newest score; it is formatted once a script (a Lua
// number passed to a command is formatted at each call, ~10% of the
// script's time at 5000 followers), and so is the inbox item
// ("SEQ AUTHOR POST"). The backlog check (does a user to deliver to
// hold items?) is skipped while the slot's held count is 0, the common
// case on one server: then a follower on a first publish costs one
// RPUSH on its inbox and one key argument (a list's tail: no skiplist
// or dict to walk, about half a sorted set's ZADD in a full inbox).
// Otherwise (the count is above 0, missing, or not kept) it runs EXISTS
// on the held sets 50 users at a time, and only a group with some
// backlog asks each user. A Redis Cluster keeps no held count: its
// scripts carry the users of one slot (~1.2 of 5000 followers), for
// whom one EXISTS costs what reading and raising a count would. A held
// follower costs one RPUSH onto its held list (and, on a publish that
// is not a first one, a look through its inbox and an LPOS on the held
// list first; a list, not a sorted set: a Lua loop's ZADD NX into held
// sets of 20 to 300 items took 2.5-3.3 to 4.6-5.9 µs a user, its RPUSH
// onto held lists 1.0-1.9 µs); on one server the script writes ha for
// the users who had nothing held and adds to hc, and hu's ZADD goes
// behind the scripts (Server.indexHolds), so a publish has no round trip
// for them (the held-index protocol: doc.go). The inbox
// list is trimmed back to max inbox when RPUSH makes it max inbox +
// min(32, ceil(max inbox/16)) long (one delivery in 32 at the default
// 1000, each LTRIM dropping 32 items), so it runs up to 31 items over
// between trims; a sorted-set inbox from
// before lists is trimmed on about one delivery in 16. A user holding
// items gets new ones held too, so posts reach the inbox in publish
// order.
var publishScript = redis.NewScript(deliverGroup + `
local out = {}
local hn, ix, ib = false, false, 2
if ARGV[7] == '1' then hn, ix, ib = KEYS[3], {hc = KEYS[4], ha = KEYS[5], posted = ARGV[9]}, 5 end
local err = deliverGroup(KEYS, 1, KEYS[2], hn, ib, ARGV[4], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[5] == '1', ARGV[6], tonumber(ARGV[8]), out, ix)
if err then return err end
return table.concat(out)
`)

// nodeScript is publishScript for the users of many slots served by one
// Redis Cluster master: one call a node instead of one a slot (5000
// followers fall into ~4300 slots, so a script a slot carried ~1.2 users
// and paid a script call's overhead for each). Redis refuses a declared
// key list that spans slots, so only KEYS[1] (the first group's counter)
// is declared, to route the call; the script reaches the other keys
// undeclared, which a script without flags may do for keys of its own
// node, one slot per command. Where a slot has moved (resharding, a stale
// slot map) the first command on it, the slot's counter INCR, fails
// before anything of that slot is written; the script stops there and
// returns the codes of the users before, and the caller sends the rest
// one slot a script (Server.deliver). Should a later command fail (a
// slot migrating key by key), the whole call fails and the caller redoes
// all its users one slot a script, as a publish that is not a first one
// (asking inboxes and held lists before adding), so what ran before is
// found as already done, and only the held count
// may come out short by those users (see the package doc).
//
// KEYS: one counter (routing only). ARGV: ref, max inbox, floor, fresh,
// key prefix (as publishScript's), then for each slot's users: the
// slot's counter, their modes (as publishScript's, held users last),
// their inboxes, the held sets of the users to hold. A slot's duplicate
// marks are named from its counter (Server.dupMarks: prefix .. 'dm:'
// and the counter's hash tag).
// Returns one digit per user, in ARGV order, up to the first slot it
// could not reach.
var nodeScript = redis.NewScript(deliverGroup + `
local ref, maxInbox, floor, fresh, prefix, since = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local out = {}
local at = 7
local dpre, cut = prefix .. 'dm:', #prefix + 4
while at <= #ARGV do
  local modes = ARGV[at + 1]
  local n = #modes
  local nh = n - ((string.find(modes, 'h', 1, true) or (n + 1)) - 1)
  if deliverGroup(ARGV, at, dpre .. string.sub(ARGV[at], cut), false, at + 1, modes, ref, maxInbox, floor, fresh, prefix, since, out, false) then break end
  at = at + 2 + n + nh
end
return table.concat(out)
`)

// deliverGroup is the body of publishScript and nodeScript: one slot's
// users. keys[k] is the slot's counter, dm its duplicate marks, hn the
// name of its held count (false: none kept), ix the shared keys to
// write (false: the caller does; else hc and ha and the post's time,
// see publishScript), keys[ib+i] user
// i's inbox, and for the nh users to hold (the last, i > n - nh) keys[ib+n+i-(n-nh)]
// their held set (n = #modes). The other users' held sets are named from
// their inbox: prefix .. 'h:' and the inbox key's hash tag. It appends
// one code a user to out and returns nil, or the error of the counter's
// INCR (the first command on the slot) having written nothing.
//
// An inbox is a list of "SEQ AUTHOR POST", oldest first; a sorted set
// there (member "AUTHOR POST", score SEQ) is an inbox written before
// lists, which the RPUSH finds by its WRONGTYPE error: the item goes to
// it with ZADD NX as before (Poll turns it into a list, pollScript).
// A list does not refuse a repeat as ZADD NX did, so a publish that is
// not a first one (fresh false) looks through the inbox (inboxHas)
// before adding, and a first one need not: no other publish of the post
// can have added it, unless a duplicate runs at the same time. That
// duplicate marks the post in the slot's marks (a sorted set scored by
// time, entries older than a day dropped) in each script before it
// delivers, and a first publish's script asks the marks once: marked,
// it looks through its users' inboxes as a duplicate does. The scripts
// of one slot run one at a time, so whichever of the two reaches a user
// second sees the other's item.
//
// The held count (see the package doc) is created with the counter, at
// 0: a counter that answers 1 was missing, so the slot has had no
// publish or release since (a release creates the counter too). Before
// holding, the count is raised by the most users this call may hold, and
// lowered afterwards by those it did not, so a call that fails midway
// leaves it high, never low. A missing count is left missing (and the
// held sets asked).
var deliverGroup = seqLagLua + inboxHas + heldLua + `
local function deliverGroup(keys, k, dm, hn, ib, modes, ref, maxInbox, floor, fresh, prefix, since, out, ix)
  local seq = redis.pcall('INCR', keys[k])
  if type(seq) == 'table' then return seq end
  if seq == 1 then
    seq = floor
    redis.call('SET', keys[k], seq)
    if hn then redis.call('SET', hn, 0, 'NX') end
  elseif seq < floor - seqLag then
    seq = floor
    redis.call('SET', keys[k], seq)
  end
  local score = string.format('%.0f', seq)
  local item = score .. ' ' .. ref
  if not fresh then
    local ms = math.floor(floor / 1000)
    redis.call('ZADD', dm, ms, ref)
    redis.call('ZREMRANGEBYSCORE', dm, '-inf', ms - 86400000)
  elseif redis.call('ZSCORE', dm, ref) then
    fresh = false
  end
  local count = nil
  if hn then count = tonumber(redis.call('GET', hn)) end
  local n = #modes
  local byte = string.byte
  local nd = (string.find(modes, 'h', 1, true) or (n + 1)) - 1
  local hb = ib + n - nd
  local hkeys = {}
  local backlog = {}
  local may = n - nd
  if count ~= 0 then
    local sub, hpre, cut = string.sub, prefix .. 'h:', #prefix + 4
    for i = 1, nd do hkeys[i] = hpre .. sub(keys[ib + i], cut) end
    for a = 1, nd, 50 do
      local b = math.min(a + 49, nd)
      if redis.call('EXISTS', unpack(hkeys, a, b)) > 0 then
        if a == b then
          backlog[a] = true
        else
          for j = a, b do backlog[j] = redis.call('EXISTS', hkeys[j]) == 1 end
        end
      end
    end
    for j = 1, nd do
      if backlog[j] and byte(modes, j) ~= 97 then may = may + 1 end
    end
  end
  for i = nd + 1, n do hkeys[i] = keys[hb + i] end
  if count and may > 0 then redis.call('INCRBY', hn, may) end
  local added = 0
  local slack = math.min(32, math.ceil(maxInbox / 16))
  local ages = {}
  for i = 1, n do
    local inbox, m, c = keys[ib + i], byte(modes, i)
    if m ~= 104 and not (backlog[i] and (m ~= 97 or heldHas(hkeys[i], ref))) then
      if not fresh and inboxHas(inbox, ref, since) then
        c = '1'
      else
        local r = redis.pcall('RPUSH', inbox, item)
        if type(r) ~= 'table' then
          if maxInbox > 0 and r >= maxInbox + slack then redis.call('LTRIM', inbox, -maxInbox, -1) end
          c = '0'
        elseif not string.find(r.err, 'WRONGTYPE', 1, true) then
          error(r.err)
        elseif redis.call('ZADD', inbox, 'NX', score, ref) == 0 then
          c = '1'
        else
          if maxInbox > 0 and (seq + i) % 16 == 0 then redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1)) end
          c = '0'
        end
      end
    elseif m == 97 then
      c = '3'
    elseif not fresh and inboxHas(inbox, ref, since) then
      c = '1'
    else
      local ok, first = hold(hkeys[i], ref, score, fresh)
      if ok then
        c = '2'
        added = added + 1
      else
        c = '3'
      end
      if ix and m == 104 and (first or not fresh) then
        local u = string.sub(inbox, #prefix + 5, -2)
        if string.find(u, '%', 1, true) then
          u = string.gsub(string.gsub(string.gsub(u, '%%7B', '{'), '%%7D', '}'), '%%25', '%%')
        end
        ages[#ages + 1] = ix.posted
        ages[#ages + 1] = u
      end
    end
    out[#out + 1] = c
  end
  if count and may > added then redis.call('DECRBY', hn, may - added) end
  if ix then
    for a = 1, #ages, 1000 do
      redis.call('ZADD', ix.ha, 'LT', unpack(ages, a, math.min(a + 999, #ages)))
    end
    if added > 0 then redis.call('INCRBY', ix.hc, added) end
  end
end
`

// inboxHas tells whether inbox holds ref: a list's items are searched
// from the newest, the newest 8 first and then 100 at a time, down to the first item whose sequence
// number is below since (a retried publish finds the items of the first
// attempt among the newest, and none of them is older than since: see
// seqLag); a sorted set (an inbox from before lists), which LLEN finds
// by its WRONGTYPE error, is asked with ZSCORE; any other LLEN error fails
// the script. Only a publish that is not a first one pays for it
// (deliverGroup).
const inboxHas = `
local function inboxHas(inbox, ref, since)
  local len = redis.pcall('LLEN', inbox)
  if type(len) == 'table' then
    if not string.find(len.err, 'WRONGTYPE', 1, true) then error(len.err) end
    return redis.call('ZSCORE', inbox, ref) ~= false
  end
  local sub, find, n = string.sub, string.find, #ref
  local hi, size = -1, 8
  while hi >= -len do
    local page = redis.call('LRANGE', inbox, math.max(-len, hi - size + 1), hi)
    for j = #page, 1, -1 do
      local e = page[j]
      if sub(e, -n) == ref and sub(e, -n - 1, -n - 1) == ' ' then return true end
      local q = tonumber(sub(e, 1, (find(e, ' ', 1, true) or 1) - 1))
      if q and q < since then return false end
    end
    hi, size = hi - size, 100
  end
  return false
end
`

// heldLua holds to and asks a user's held list ("AUTHOR POST" refs in
// hold order, oldest first; a sorted set there, member the ref scored by
// the hold sequence, is a held set from before lists, which LPOS or
// RPUSH finds by its WRONGTYPE error: it is added to and asked as before,
// and a release empties it in order). hold appends ref and tells whether
// it did: on a first publish (fresh, see deliverGroup) without asking,
// as no other publish can have held the post; otherwise only when LPOS
// does not find it there (a held list is short next to an inbox: what a
// user received while delayed). heldHas tells whether ref is held.
const heldLua = `
local function hold(hk, ref, score, fresh)
  local r = false
  if not fresh then
    r = redis.pcall('LPOS', hk, ref)
    if r and type(r) ~= 'table' then return false, false end
  end
  if not r then r = redis.pcall('RPUSH', hk, ref) end
  if type(r) ~= 'table' then return true, r == 1 end
  if not string.find(r.err, 'WRONGTYPE', 1, true) then error(r.err) end
  return redis.call('ZADD', hk, 'NX', score, ref) == 1, true
end
local function heldHas(hk, ref)
  local p = redis.pcall('LPOS', hk, ref)
  if type(p) == 'table' then
    if not string.find(p.err, 'WRONGTYPE', 1, true) then error(p.err) end
    return redis.call('ZSCORE', hk, ref) ~= false
  end
  return p ~= false
end
`

// seqLagLua is seqLagMicros for the scripts.
var seqLagLua = "local seqLag = " + strconv.Itoa(seqLagMicros) + "\n"

// nextSeq starts every script that makes items visible or holds them:
// seq is one more than the slot's counter KEYS[1], which the script
// stores back. Scores come only from the counter, which grows with every
// such script of the slot, so an item is always newer than every item
// of its inbox or held set, whatever user it went to. A missing counter
// starts at the floor (the clock in µs): above the scores written before
// counters existed (one more than the inbox's newest), and above
// anything a lost (evicted) counter handed out, since a counter grows by
// one a script and a slot runs far fewer than one script a µs.
// (publishScript does the same with one INCR: a counter that answers 1
// was missing.)
var nextSeq = seqLagLua + `
local function nextSeq(floor)
  local c = tonumber(redis.call('GET', KEYS[1]))
  if c and c + 1 >= floor - seqLag then return c + 1 end
  return floor
end
`

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
// KEYS: the slot's sequence counter, its held count (one server only),
// then inbox, held for each user. ARGV: max inbox, the sequence floor
// (as publishScript's), "1" when KEYS[2] is the held count, then one
// quota per user. Each released item gets a fresh sequence number from
// the slot's counter (a user's items in hold order: the held list's
// head first, LRANGE then LTRIM; a held set from before lists, a sorted
// set, by score, ZRANGE then ZREMRANGEBYRANK), so it lands after
// every cursor handed out; the inbox is trimmed to max inbox; the held
// count (when it exists) is lowered by the items taken from the held
// sets. An inbox from before lists (a sorted set) gets its items with
// ZADD NX, as before. A list inbox is not asked whether it has an item
// already: no publish both delivers and holds one post for a user
// (deliverGroup's marks). Returns three values per user: items moved,
// items still held, the ref of the oldest still held ("" when none).
var moveScript = redis.NewScript(nextSeq + `
local maxInbox = tonumber(ARGV[1])
local base = nextSeq(tonumber(ARGV[2]))
local top = base - 1
local taken = 0
local out = {}
local hn, at = false, 0
if ARGV[3] == '1' then hn, at = KEYS[2], 1 end
for i = 1, (#KEYS - 1 - at) / 2 do
  local inbox, hk, q = KEYS[2*i+at], KEYS[2*i+1+at], tonumber(ARGV[3+i])
  local moved = 0
  local refs, zset = redis.pcall('LRANGE', hk, 0, q - 1), false
  if refs.err then
    if not string.find(refs.err, 'WRONGTYPE', 1, true) then error(refs.err) end
    refs, zset = redis.call('ZRANGE', hk, 0, q - 1), true
  end
  if #refs > 0 then
    local items = {}
    for j, ref in ipairs(refs) do items[j] = string.format('%.0f', base + j - 1) .. ' ' .. ref end
    local seq = base + #refs
    local r = redis.pcall('RPUSH', inbox, unpack(items))
    if type(r) ~= 'table' then
      if maxInbox > 0 then redis.call('LTRIM', inbox, -maxInbox, -1) end
    elseif not string.find(r.err, 'WRONGTYPE', 1, true) then
      error(r.err)
    else
      seq = base
      for _, ref in ipairs(refs) do
        if redis.call('ZADD', inbox, 'NX', seq, ref) == 1 then
          seq = seq + 1
        end
      end
      if maxInbox > 0 then
        redis.call('ZREMRANGEBYRANK', inbox, 0, -(maxInbox + 1))
      end
    end
    moved = #refs
    if seq - 1 > top then top = seq - 1 end
    if zset then redis.call('ZREMRANGEBYRANK', hk, 0, #refs - 1) else redis.call('LTRIM', hk, #refs, -1) end
    taken = taken + #refs
  end
  local left, head = 0, ''
  if zset then
    left = redis.call('ZCARD', hk)
    if left > 0 then head = redis.call('ZRANGE', hk, 0, 0)[1] end
  else
    left = redis.call('LLEN', hk)
    if left > 0 then head = redis.call('LINDEX', hk, 0) end
  end
  out[#out + 1] = moved
  out[#out + 1] = left
  out[#out + 1] = head
end
if top >= base then redis.call('SET', KEYS[1], top) end
if hn and taken > 0 and redis.call('EXISTS', hn) == 1 then redis.call('DECRBY', hn, taken) end
return out
`)

// pollScript reads a page of one inbox: the items after a cursor, among
// its newest max inbox only (a delivery trims the inbox lazily, so it
// may hold a few older ones that a poll never shows).
//
// KEYS: inbox. ARGV: cursor (a sequence number, as digits), limit, max
// inbox. Returns the items ("SEQ AUTHOR POST"), oldest first. The list
// is in sequence order (every item's number is above all before it, see
// deliverGroup), so the first item after the cursor is found by binary
// search with LINDEX (about 10 for a full inbox; one when the newest is
// not after the cursor), and the page is one LRANGE. An inbox from
// before lists (a sorted set) is first turned into the list of its
// members in score order, trimmed to max inbox: once a user, about a
// millisecond for a full one.
var pollScript = redis.NewScript(`
local key, after, limit, maxInbox = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local kind = redis.call('TYPE', key)['ok']
if kind == 'zset' then
  local zs = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  redis.call('DEL', key)
  local items = {}
  for i = 1, #zs, 2 do
    items[#items + 1] = string.format('%.0f', tonumber(zs[i + 1])) .. ' ' .. zs[i]
    if #items == 500 or i + 1 == #zs then
      redis.call('RPUSH', key, unpack(items))
      items = {}
    end
  end
  if maxInbox > 0 then redis.call('LTRIM', key, -maxInbox, -1) end
elseif kind ~= 'list' then
  return {}
end
local function seqOf(e) return tonumber(string.sub(e, 1, string.find(e, ' ', 1, true) - 1)) end
local n = redis.call('LLEN', key)
if n == 0 or seqOf(redis.call('LINDEX', key, -1)) <= after then return {} end
local lo, hi = 0, n - 1
if maxInbox > 0 and n > maxInbox then lo = n - maxInbox end
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if seqOf(redis.call('LINDEX', key, mid)) > after then hi = mid else lo = mid + 1 end
end
return redis.call('LRANGE', key, lo, lo + limit - 1)
`)
