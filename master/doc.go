// Package master is Willow's master: the registry of nodes (heartbeats,
// ejection and probed recovery), Route (two address lists from different
// regions plus the flex snapshot), the flex state (validated, versioned,
// persisted in Redis, streamed by Watch, audited), drills and the on-call
// web console. Several masters may share one Redis.
//
// # Registry and shared state
//
// Every node registers and then heartbeats (default every second) with
// its load. The master that receives a heartbeat writes the node's entry
// to Redis (key node:ID, expiring EntryTTL after the last heartbeat) with
// the request counts of the last SuccessWindow. A heartbeat for an entry
// Redis no longer holds is answered with reregister. Health judgements
// live in Redis too (key health:ID). Every master reloads the registry
// every RefreshInterval and answers Route from that snapshot (through an
// index of it, route_index.go), so any master answers Route, a restarted
// master loses nothing, and a master keeps answering from its last
// snapshot while Redis is briefly away. A reload reads only the entries
// written since the last one (every write scores its node in the change
// log nodes:changed under the sequence nodes:seq; registry_sync.go), and
// the whole registry every 10 s and after Redis lost the sequence.
//
// # Ejection and recovery
//
// One master at a time (the holder of a Redis lease, LeaseTTL; another
// takes over when it lapses) probes nodes with gRPC health checks every
// ProbeInterval and judges them. A round checks every probing node and at
// most ProbeBudget (default 500) healthy ones: a larger fleet's healthy
// nodes take turns, so each is checked every ceil(healthy/ProbeBudget)
// rounds and a node that heartbeats but fails its probes leaves that many
// times later (30 s at 5000 healthy nodes). A round's probes start paced
// over the first half of ProbeInterval (a group every 5 ms), not all at
// once: started 32 at a time, a round of 500 probes ran as one ~80 ms
// burst, and a third of the slow Route calls started in a judge round.
//
//   - A node without a heartbeat for MissedAfter (default 3 s) is out of
//     Route at once, whatever the judgement, and is then marked ejected
//     (missed_heartbeats). Dead nodes always leave.
//   - A node whose reported success rate over SuccessWindow is at or under
//     MinSuccessRate (default 50%) with at least MinRequests (default 20)
//     requests, or that fails ProbeFailures (default 3) probes in a row,
//     is ejected for bad health. At most maxEjected(n) of the n live nodes
//     of one role in one region are out for bad health at once:
//     floor(n × MaxEjectFraction), at least 1, never all — 0 of 1, 1 of 2,
//     1 of 3, 2 of 6 with the default third. The worst node goes first.
//   - An ejected node is not probed during its protection window
//     (Protection, default 10 s). Then it is probing; ProbeSuccesses
//     (default 3) good probes in a row make it healthy again, one failed
//     probe ejects it again with a doubled window. A node ejected within
//     FlapMemory of its last recovery gets a doubled window too (capped at
//     MaxProtection), so a flapping node stays out longer each time. A good
//     heartbeat alone never re-admits a node.
//
// A probe is the standard gRPC health Check (the server's overall
// status, with the node's client TLS), spoken over HTTP/2 on one
// connection kept per node address but without a grpc.ClientConn
// (h2Prober): an idle probe connection is a socket and its header
// tables, no goroutine and no buffers (with ClientConns, the leader's
// connections to a 5000-node fleet were 25 000 of its 35 000 goroutines
// and over half its heap; BenchmarkFleet). A probe passes only when the
// address answers SERVING; a cached connection found closed before the
// node took the request is dialled again once within the probe.
//
// # Route
//
// Route(role, region) lists healthy nodes of the caller's region, least
// loaded first ((in-flight + queue ms/10) / capacity), as primary, and the
// healthy nodes of the best other region (most healthy nodes) as
// secondary. The two lists never share a region. When the caller's region
// has no healthy node, primary is another region and reason says why.
// The reply carries the flex snapshot and a TTL (RouteTTL, default 5 s).
//
// # Drills
//
// SetDrill (on-call token) orders a node to add latency, fail a fraction
// of its requests or stop heartbeating, until an expiry; a drill with
// for_ms 0 ends early. Drills are stored in Redis, sent to the node in
// every heartbeat response (the node applies and expires them by
// itself), and every attempt is audited.
//
// # Auto-flex and scheduled changes
//
// Auto-flex (autoflex.go, policy autoflex.yaml) steps the flex level from
// the signals in the nodes' heartbeats: compress queue p99 and backlog,
// upload in-flight and shedding, store writes against store_write_budget,
// edge bytes out, timeline held items. Each rule has a threshold, a dwell,
// a hysteresis threshold and a cooldown; the policy has a ceiling (default
// yellow). Every step is an ordinary flex change (actor auto-flex, the
// reason naming rule and values); down is one level at a time; a manual
// change pauses it for the manual hold; dry-run only proposes. Scheduled
// changes (schedule.go) are flex changes stored ahead and applied on time.
// Both live in the flex document, so they survive restart and failover,
// and only the lease holder acts, with compare-and-set against the state
// it decided on. The guarantees are spelled out in autoflex.go.
package master
