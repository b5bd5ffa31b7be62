// Package timeline is Willow's timeline service: it fans "friend posted"
// notifications out to followers' inboxes in Redis, holds back the
// notifications of a ratio of users while the timeline_delay_ratio flex
// knob is up (so their apps fetch no new media), and releases the backlog
// at a capped, cluster-wide rate when the ratio comes down.
//
// Data model (all keys under Config.KeyPrefix, default "willow:tl:"; {…}
// is a Redis Cluster hash tag; USER is escaped in tags, '{' as %7B):
//
//	f:AUTHOR          set     followers of AUTHOR
//	p:AUTHOR POST     hash    the post: media IDs, posted-at, publish outcome
//	in:{USER}         list    USER's inbox, oldest first; items "SEQ AUTHOR POST",
//	                          SEQ = delivery sequence (a zset there, member
//	                          "AUTHOR POST" scored by SEQ, is an inbox from before
//	                          lists: written as before, turned into a list by Poll)
//	h:{USER}          list    USER's held items, "AUTHOR POST", oldest first (publish
//	                          order; a zset there, scored by the hold sequence, is a
//	                          held set from before lists: held to and released as before)
//	sq:{SLOT}         string  the sequence counter of the users of one cluster slot
//	                          (one server: {PREFIX}sq); SLOT is a tag of that slot's own
//	dm:{SLOT}         zset    the slot's duplicate marks: posts a publish that was not
//	                          the first ran for, scored by time (ms), kept a day
//	                          (one server: {PREFIX}dm)
//	{PREFIX}sh        string  one server only: the held count, at least the items the
//	                          held sets hold
//	{PREFIX}hu        zset    held users, score = the user's stable hash in [0,1)
//	{PREFIX}ha        zset    held users, score = posted-at (ms) of their oldest held item
//	{PREFIX}hc, rel   string  held item count, released item count
//	{PREFIX}rl        hash    the cluster-wide release token bucket
//
// One user's inbox and held set share a slot; the shared keys share
// another. The Redis may be one server or a Redis Cluster (Deps.Redis):
// each script command touches keys of one slot. Publishing runs one
// script per FanoutBatch followers on one server, and on a cluster one
// script per master's followers (nodeScript: the keys are all that
// master's, one slot's counter and users after another, since 5000
// followers fall in ~4300 slots; where the client's slot map is stale
// the users of a slot the script cannot reach are sent one slot a
// script), all pipelined; the users now holding the post are indexed
// behind the scripts in their pipeline on one server (it runs them in
// order; ha by the scripts themselves, for a user's first held item), in
// a step after the scripts on a cluster (and for a user held behind a
// backlog);
// a release step takes tokens and picks users (one script on the shared
// keys), moves their items (one script per slot, pipelined), then
// updates the index and gives back unused tokens.
//
// Guarantees:
//   - Poll returns a user's items in delivery order with an exact cursor:
//     every item gets a fresh sequence number when it becomes visible (on
//     delivery or on release), the next of its slot's counter, in the
//     same Lua script that makes it visible, so an item released later is
//     never "in the past" of a cursor: nothing is skipped and nothing is
//     returned twice. (The counter is per slot, not per inbox, so a
//     publish reads no inbox for its newest score.) The inbox list is in
//     sequence order, so Poll finds the cursor by binary search.
//   - An inbox keeps the newest MaxInbox items: a release trims it
//     exactly, a delivery when its RPUSH makes the list MaxInbox +
//     min(32, ceil(MaxInbox/16)) long (one delivery in 32 at the default
//     1000, so no delivery pays for a trim it does not need), so between
//     trims an inbox holds up to 31 items more (a sorted-set inbox from
//     before lists: trimmed on about one delivery in 16, up to about 15
//     more); Poll reads among the newest MaxInbox only.
//   - Publish is idempotent per (author, post ID): a retry, or a concurrent
//     duplicate, yields one item per inbox; the first publish's media and
//     time win. A list does not refuse a repeat, so a publish that is not
//     the first of its post (its post record existed) looks through each
//     inbox before adding, and marks the post in the slot's duplicate
//     marks first; the first publish asks the marks once a script and
//     looks only when marked (deliverGroup): the scripts of one slot run
//     one at a time, so the second to reach a user sees the other's item.
//   - A user is delayed when the cluster's user hash (node.UserHash,
//     shedding.UserHash.InRatio) puts them among the timeline_delay_ratio
//     of least priority this hour: the same users shed_ratio sheds at the
//     edge and the upload front. Authors always see their own posts at once.
//   - A user's items become visible in publish order: while a user has
//     held items, new items queue behind them even if the user is no
//     longer delayed. On one server a publish asks the held sets of the
//     users it delivers to only while the held count is above 0 or
//     missing (a Redis Cluster has no count and always asks): the
//     scripts that hold raise the count first (by the most they may
//     hold) and lower it after, and a release lowers it by what it took,
//     each in the script that changes the held sets, so the count is
//     never below the items held, and a script failing midway leaves it
//     high (publishes then keep asking). The count is created, at 0, by
//     the publish that creates the sequence counter (the first script);
//     a Redis whose counter predates the count, or whose count was
//     deleted, has none and is always asked. A counter missing while
//     users hold items would make the new count short: items held by a
//     version without counters (drain them before upgrading from one),
//     or a counter evicted (allkeys eviction, which loses held items
//     themselves too).
//   - Release moves a user's items from held to inbox in one Lua script
//     per slot's batch, so concurrent publishing and releasing never lose
//     or duplicate an item; the rate is capped by a token bucket in Redis
//     (refilled from Redis's own clock; a step takes its budget up front
//     and gives back what it did not move), so any number of timeline
//     services together move at most timeline_release_per_s items per
//     second (a burst of at most 1/10 s worth after idling). 0 pauses the
//     release. All release state lives in Redis: a restarted service
//     simply continues.
//   - Every user with held items is in the held index: publishing indexes
//     after holding (on one server behind the scripts in their pipeline,
//     and again behind scripts resent for NOSCRIPT, ha in the script that
//     holds a user's first item, since a user already holding items is in
//     it with an older time, to within the clock skew between services;
//     on a cluster, and for a user held behind a backlog, in a step after
//     them), and a release
//     that empties a user's held set drops the user and then looks at the
//     set again (a publish in between is put back). A publish that fails
//     midway returns an error; retrying it (publish is idempotent)
//     indexes what it held, the index being written for items found
//     already held too. (On one server a user to hold is indexed even
//     where the post was in their inbox already, a retry after the ratio
//     went up: a release step that picks them drops them again.) The
//     held count is a counter beside the sets: on one server the script
//     that holds adds to it; on a cluster a publish that dies between its
//     two steps leaves it short by what it held, as does a script that
//     fails midway on a slot migrating under it (its users are redone and
//     found already held).
//   - A first publish of a post (its record was new) holds a delayed
//     user's item without asking whether the inbox or the held list has
//     it, unless the slot's marks hold the post. A retried or concurrent duplicate
//     publish asks, looking through the inbox's items down to the first
//     numbered below the post record's time less five minutes (the clock
//     skew allowed between timeline services) and a second: every script
//     that numbers items lifts its slot's counter to its clock when the
//     counter trails it by more than a second, so no item of the post is
//     numbered lower; it asks the held list with LPOS. So no publish
//     leaves one post both held and in an inbox, or held twice, and a
//     release adds to a list without asking it.
//   - Upgrading from sorted-set inboxes needs no migration step: a
//     publish or release finds the old inbox by RPUSH's WRONGTYPE and adds
//     to it with ZADD NX as before (at the old cost); the user's first
//     Poll turns it into a list (its members in score order, trimmed),
//     cursors unchanged (the scores are the sequence numbers). While old
//     and new services run side by side, an old one's ZADD on a list
//     fails (WRONGTYPE: UNAVAILABLE redis, the publish retried) and an
//     old Poll of a list fails likewise: upgrade all services together.
//     Held sets from before held lists (sorted sets) likewise: a hold
//     finds one by RPUSH's or LPOS's WRONGTYPE and adds with ZADD NX, the
//     release moves its items in score order and removes them by rank; it
//     is gone, as any empty key, once released. An old service's hold or
//     release on a held list fails (WRONGTYPE), as above.
//
// Errors: RPCs return INVALID_ARGUMENT with reason bad_request (empty or
// malformed IDs) or bad_cursor, and UNAVAILABLE with reason redis when
// Redis fails.
package timeline
