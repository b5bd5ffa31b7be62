// Package timeline is Willow's timeline service: it fans "friend posted"
// notifications out to followers' inboxes in Redis, holds back the
// notifications of a ratio of users while the timeline_delay_ratio flex
// knob is up (so their apps fetch no new media), and releases the backlog
// at a capped, cluster-wide rate when the ratio comes down.
//
// Data model (all keys under Config.KeyPrefix, default "willow:tl:"):
//
//	f:AUTHOR          set     followers of AUTHOR
//	p:AUTHOR POST     hash    the post: media IDs, posted-at, publish outcome
//	in:USER           zset    USER's inbox; member "AUTHOR POST", score = delivery sequence
//	h:USER            zset    USER's held items, score = hold sequence (publish order)
//	seq               string  the global delivery sequence
//	hu                zset    held users, score = the user's stable hash in [0,1)
//	ha                zset    held users, score = posted-at (ms) of their oldest held item
//	hc, rel           string  held item count, released item count
//	rl                hash    the cluster-wide release token bucket
//
// Guarantees:
//   - Poll returns a user's items in delivery order with an exact cursor:
//     every item gets a fresh sequence number when it becomes visible (on
//     delivery or on release), in the same Lua script that makes it
//     visible, so an item released later is never "in the past" of a
//     cursor: nothing is skipped and nothing is returned twice.
//   - Publish is idempotent per (author, post ID): a retry, or a concurrent
//     duplicate, yields one item per inbox; the first publish's media and
//     time win.
//   - A user is delayed when HashUnit(user) < timeline_delay_ratio; the
//     hash is FNV-1a 64 with a splitmix64 finalizer, the same in every
//     process and release. Authors always see their own posts at once.
//   - A user's items become visible in publish order: while a user has
//     held items, new items queue behind them even if the user is no
//     longer delayed.
//   - Release moves items from held to inbox in one Lua script per batch,
//     so concurrent publishing and releasing never lose or duplicate an
//     item; the rate is capped by a token bucket in Redis (refilled from
//     Redis's own clock), so any number of timeline services together move
//     at most timeline_release_per_s items per second (a burst of at most
//     1/10 s worth after idling). 0 pauses the release. All release state lives in
//     Redis: a restarted service simply continues.
//   - The scripts touch keys they compute, so the Redis must be a single
//     instance (or a primary with replicas), not Redis Cluster.
//
// Errors: RPCs return INVALID_ARGUMENT with reason bad_request (empty or
// malformed IDs) or bad_cursor, and UNAVAILABLE with reason redis when
// Redis fails.
package timeline
