// Package master is Willow's master: the registry of nodes (heartbeats,
// ejection and probed recovery), Route (two address lists from different
// regions plus the flex snapshot), the flex state (validated, versioned,
// persisted in Redis, streamed by Watch, audited), drills and the on-call
// web console. Several masters may share one Redis.
package master
