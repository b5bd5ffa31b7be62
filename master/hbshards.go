package master

import (
	"hash/maphash"
	"sync"
)

// Per-node heartbeat state this master keeps (the last heartbeat it
// received, the success-window samples and the node's Redis keys), in
// shards with their own locks: a heartbeat touches one shard and never
// waits for Route, the registry refresh or another shard's heartbeats
// (BenchmarkFleet, N=5000).
const hbShardCount = 64

type hbShard struct {
	mu    sync.Mutex
	nodes map[string]*hbNode
}

// hbNode is one node's heartbeat state (its shard's lock held).
type hbNode struct {
	seen    int64    // last heartbeat received, unix ms
	window  []sample // heartbeats within the success window
	nodeKey string   // its entry's and binding's Redis keys, made once:
	bindKey string   // every heartbeat's batch names both
}

type hbShards struct {
	seed   maphash.Seed
	shards [hbShardCount]hbShard
}

func newHBShards() *hbShards {
	h := &hbShards{seed: maphash.MakeSeed()}
	for i := range h.shards {
		h.shards[i].nodes = map[string]*hbNode{}
	}
	return h
}

func (h *hbShards) shard(id string) *hbShard {
	return &h.shards[maphash.String(h.seed, id)%hbShardCount]
}

// node returns id's state, made with s's keys for it if it has none (the
// shard's lock held).
func (sh *hbShard) node(s *Server, id string) *hbNode {
	n := sh.nodes[id]
	if n == nil {
		n = &hbNode{nodeKey: s.nodeKey(id), bindKey: s.bindKey(id)}
		sh.nodes[id] = n
	}
	return n
}

// seenMs is the last heartbeat this master received from id (0: none).
func (h *hbShards) seenMs(id string) int64 {
	sh := h.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.nodes[id]; n != nil {
		return n.seen
	}
	return 0
}

// forget drops the nodes not in known.
func (h *hbShards) forget(known map[string]bool) {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for id := range sh.nodes {
			if !known[id] {
				delete(sh.nodes, id)
			}
		}
		sh.mu.Unlock()
	}
}
