package master

import (
	"hash/maphash"
	"sync"
)

// Per-node heartbeat state this master keeps (the last heartbeat it
// received and the success-window samples), in shards with their own
// locks: a heartbeat touches one shard and never waits for Route, the
// registry refresh or another shard's heartbeats (BenchmarkFleet, N=5000).
const hbShardCount = 64

type hbShard struct {
	mu      sync.Mutex
	seen    map[string]int64    // last heartbeat received, unix ms
	windows map[string][]sample // heartbeats within the success window
}

type hbShards struct {
	seed   maphash.Seed
	shards [hbShardCount]hbShard
}

func newHBShards() *hbShards {
	h := &hbShards{seed: maphash.MakeSeed()}
	for i := range h.shards {
		h.shards[i].seen = map[string]int64{}
		h.shards[i].windows = map[string][]sample{}
	}
	return h
}

func (h *hbShards) shard(id string) *hbShard {
	return &h.shards[maphash.String(h.seed, id)%hbShardCount]
}

// seenMs is the last heartbeat this master received from id (0: none).
func (h *hbShards) seenMs(id string) int64 {
	sh := h.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.seen[id]
}

// forget drops the nodes not in known.
func (h *hbShards) forget(known map[string]bool) {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for id := range sh.seen {
			if !known[id] {
				delete(sh.seen, id)
				delete(sh.windows, id)
			}
		}
		sh.mu.Unlock()
	}
}
