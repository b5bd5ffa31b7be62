package master

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Route answers from an index of the registry snapshot, built when a
// snapshot is installed (refresh) and read without a lock: per role, the
// healthy nodes of each region, ordered, as endpoints. At N = 5000 a
// Route copied its role's entries from the snapshot (a shard lock each,
// for this master's last heartbeats), grouped and sorted them, and built
// the endpoints, on every call (BenchmarkFleet).
//
// The index answers exactly what a Route computed from the snapshot and
// this master's heartbeats would, because it is rebuilt when that would
// differ: a new snapshot; the first moment a listed node stops being
// alive (validUntil); a heartbeat from a node the index left out only for
// silence (revivable: judged healthy, not alive when it was built); or a
// clock that went back.
type routeIdx struct {
	seq        uint64    // builds are numbered in the order they start
	view       *view     // the snapshot it was built from
	builtAt    time.Time // the clock when it was built
	validUntil int64     // unix ms: a listed node is not alive from here on
	revivable  map[string]bool
	roles      map[string]*roleRoutes
	stale      atomic.Bool // a revivable node heartbeat
}

// routeState is the master's route index.
type routeState struct {
	idx     atomic.Pointer[routeIdx]
	buildMu sync.Mutex    // one rebuild at a time
	started atomic.Uint64 // the seq of the last build started (written under buildMu)
}

// buildRouteIndex indexes v with this master's heartbeats at now.
func (s *Server) buildRouteIndex(v *view, now time.Time) *routeIdx {
	idx := &routeIdx{view: v, builtAt: now, validUntil: math.MaxInt64, revivable: map[string]bool{},
		roles: map[string]*roleRoutes{}}
	v = s.withSeen(v)
	roles := map[string]bool{}
	for _, e := range v.entries {
		roles[e.info.GetRole()] = true
		if e.h.State != "" && e.h.State != StateHealthy {
			continue
		}
		if !e.alive(now, s.cfg.MissedAfter) {
			idx.revivable[e.info.GetId()] = true
			continue
		}
		idx.validUntil = min(idx.validUntil, e.lastMs+s.cfg.MissedAfter.Milliseconds())
	}
	for role := range roles {
		idx.roles[role] = groupRoutes(v.entries, now, s.cfg.MissedAfter, role)
	}
	return idx
}

// installRouteIndex indexes a new snapshot.
func (s *Server) installRouteIndex(v *view) {
	s.routes.buildMu.Lock()
	defer s.routes.buildMu.Unlock()
	s.storeRouteIndex(v, s.now())
}

// storeRouteIndex builds and installs the index of v at now, numbered.
// The caller holds buildMu.
func (s *Server) storeRouteIndex(v *view, now time.Time) *routeIdx {
	seq := s.routes.started.Add(1)
	idx := s.buildRouteIndex(v, now)
	idx.seq = seq
	s.routes.idx.Store(idx)
	return idx
}

// usable reports whether idx still answers for snapshot v at now.
func (idx *routeIdx) usable(v *view, now time.Time) bool {
	return idx != nil && idx.view == v && !idx.stale.Load() && now.UnixMilli() < idx.validUntil && !now.Before(idx.builtAt)
}

// routeIndex returns an index that answers for the current snapshot and
// now, loading the snapshot first if there is none.
//
// Calls that find the index out of date while another call rebuilds it
// take the index that call built, when its build started after they
// began: it answers for a moment within their call, so the answer is one
// a Route at that moment would give. At N = 5000, with heartbeats late,
// nearly every Route found the index stale (a silent node heartbeat, or a
// listed one fell silent) and the calls rebuilt it one after the other,
// each waiting for the rebuilds ahead of it (BenchmarkFleet: Route p50
// over a second).
func (s *Server) routeIndex(ctx context.Context) (*routeIdx, error) {
	began := s.routes.started.Load()
	v, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if idx := s.routes.idx.Load(); idx.usable(v, now) {
		return idx, nil
	}
	s.routes.buildMu.Lock()
	defer s.routes.buildMu.Unlock()
	s.mu.Lock()
	v = s.view // refresh may have installed a newer one meanwhile
	s.mu.Unlock()
	now = s.now()
	if idx := s.routes.idx.Load(); idx.usable(v, now) || (idx != nil && idx.seq > began && idx.view == v && !now.Before(idx.builtAt)) {
		return idx, nil
	}
	return s.storeRouteIndex(v, now), nil
}

// routeHeartbeat tells the index that id heartbeat: a node it left out
// for silence makes it stale.
func (s *Server) routeHeartbeat(id string) {
	if idx := s.routes.idx.Load(); idx != nil && idx.revivable[id] {
		idx.stale.Store(true)
	}
}
