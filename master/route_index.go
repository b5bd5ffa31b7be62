package master

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// Route answers from an index of the registry snapshot: per role, the
// healthy nodes of each region, ordered, as endpoints. The index is
// immutable once built and read without a lock. Refresh builds it with
// each snapshot it installs; the route builder (runRoutes) builds it
// again in the background when it goes out of date between snapshots; a
// Route call never waits for a build but at start (no index yet) or for a
// snapshot installed without one. At N = 5000 a Route copied its role's
// entries from the snapshot (a shard lock each, for this master's last
// heartbeats), grouped and sorted them, and built the endpoints, on every
// call; then (session 6) it rebuilt the index whenever it found it out of
// date, about once a call with heartbeats late, and the calls' tail was
// those rebuilds behind the heartbeat load (BenchmarkFleet).
//
// What a Route answers from the index is what one computed from the
// snapshot and this master's heartbeats would, but for a node that comes
// back from silence: a listed node that falls silent (its last heartbeat
// MissedAfter ago, in the snapshot and at this master) is left out of the
// answer at once (the index keeps each endpoint's deadline), while a node the index left out for silence
// and that heartbeats again is listed from the next build, which its
// heartbeat asks for (routeHeartbeat): out a moment longer, never in a
// moment too long.
type routeIdx struct {
	seq        uint64    // builds are numbered in the order they start
	view       *view     // the snapshot it was built from
	builtAt    time.Time // the clock when it was built
	validUntil int64     // unix ms: a listed node is not alive from here on
	missedMs   int64     // MissedAfter
	revivable  map[string]bool
	roles      map[string]*roleRoutes
	stale      atomic.Bool // a revivable node heartbeat
}

// routeState is the master's route index.
type routeState struct {
	idx     atomic.Pointer[routeIdx]
	buildMu sync.Mutex    // one build at a time
	started atomic.Uint64 // the seq of the last build started (written under buildMu)
	kick    chan struct{} // asks runRoutes for a build (capacity 1)
}

// buildRouteIndex indexes v with this master's heartbeats at now. It
// reads each entry's last heartbeat as the later of the snapshot's and
// this master's, without copying the entries (withSeen).
func (s *Server) buildRouteIndex(v *view, now time.Time) *routeIdx {
	nowMs, missed := now.UnixMilli(), s.cfg.MissedAfter.Milliseconds()
	idx := &routeIdx{view: v, builtAt: now, validUntil: math.MaxInt64, missedMs: missed, revivable: map[string]bool{},
		roles: map[string]*roleRoutes{}}
	byRole := map[string]map[string][]*entry{}
	// A listed node's deadline is its last heartbeat's plus MissedAfter:
	// the snapshot's, unless that is older than half of MissedAfter and
	// this master heard from it since (this master's heartbeats are in
	// locked shards, one lock a read; with slices.SortFunc in endpoints,
	// BenchmarkRouteIndexBuild at 5000 nodes went 2.9 -> 1.4 ms).
	// A deadline from the snapshot alone is at most earlier than the
	// exact one, never later: live checks a listed node past it against
	// this master's heartbeats.
	seen := map[*entry]int64{} // the few deadlines from this master's heartbeats
	for _, e := range v.entries {
		role := e.info.GetRole()
		regions := byRole[role]
		if regions == nil {
			regions = map[string][]*entry{}
			byRole[role] = regions // a role without a healthy node answers no_healthy_nodes
		}
		if e.h.State != "" && e.h.State != StateHealthy {
			continue
		}
		last := e.lastMs
		if nowMs-last >= missed/2 {
			if ms := s.hb.seenMs(e.info.GetId()); ms > last {
				last = ms
				seen[e] = ms
			}
		}
		if nowMs-last >= missed { // not alive (entry.alive)
			idx.revivable[e.info.GetId()] = true
			continue
		}
		idx.validUntil = min(idx.validUntil, last+missed)
		regions[e.info.GetRegion()] = append(regions[e.info.GetRegion()], e)
	}
	until := func(e *entry) int64 {
		if ms, ok := seen[e]; ok {
			return ms + missed
		}
		return e.lastMs + missed
	}
	for role, regions := range byRole {
		idx.roles[role] = newRoleRoutes(regions, until)
	}
	return idx
}

// live is role's routes at now: the index's as built while every listed
// node is alive, else without the nodes that fell silent since. seen is
// this master's last heartbeat of a node (hbShards.seenMs): a listed node
// past its deadline that heartbeat since is still in. nil where no node
// of role is listed.
func (idx *routeIdx) live(role string, now time.Time, seen func(id string) int64) *roleRoutes {
	r := idx.roles[role]
	if nowMs := now.UnixMilli(); r != nil && nowMs >= r.minUntil {
		r = r.aliveAt(nowMs, func(ep *willowv1.Endpoint) bool { return nowMs-seen(ep.GetNodeId()) < idx.missedMs })
	}
	return r
}

// wire is the Route answer for role and region at now, each list cut to
// perList endpoints (0: every one), encoded (roleRoutes.wire; Flex and
// TtlMs unset): the index's shared encoding while every listed node is
// alive, else one for this call.
func (idx *routeIdx) wire(role, region string, perList int, now time.Time, seen func(id string) int64) ([]byte, error) {
	return idx.live(role, now, seen).wire(role, region, perList)
}

// aliveAt is r without the endpoints whose deadline is past at nowMs and
// that are not alive (as alive tells).
func (r *roleRoutes) aliveAt(nowMs int64, alive func(*willowv1.Endpoint) bool) *roleRoutes {
	out := &roleRoutes{regions: make([]string, 0, len(r.regions)), eps: make(map[string][]*willowv1.Endpoint, len(r.eps))}
	for _, reg := range r.regions {
		var eps []*willowv1.Endpoint
		for i, ep := range r.eps[reg] {
			if nowMs < r.until[reg][i] || alive(ep) {
				eps = append(eps, ep)
			}
		}
		if len(eps) > 0 {
			out.regions = append(out.regions, reg)
			out.eps[reg] = eps[:len(eps):len(eps)]
		}
	}
	sortRegions(out)
	return out
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

// current reports whether idx answers for snapshot v at now as a new
// build would.
func (idx *routeIdx) current(v *view, now time.Time) bool {
	return idx != nil && idx.view == v && !idx.stale.Load() && now.UnixMilli() < idx.validUntil && !now.Before(idx.builtAt)
}

// routeIndex returns the index to answer from, loading the snapshot first
// if there is none. An index of the current snapshot is used as it is
// (answer leaves out the nodes fallen silent since); when it is out of
// date, the route builder is asked for a new one. Only without an index
// of the current snapshot (at start, or a snapshot installed without its
// index) does the call build one, and calls that find another call
// building take the index that call built when its build started after
// they began: it answers for a moment within their call.
func (s *Server) routeIndex(ctx context.Context) (*routeIdx, error) {
	began := s.routes.started.Load()
	v, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if idx := s.routes.idx.Load(); idx != nil && idx.view == v {
		if !idx.current(v, now) {
			s.kickRoutes()
		}
		return idx, nil
	}
	s.routes.buildMu.Lock()
	defer s.routes.buildMu.Unlock()
	s.mu.Lock()
	v = s.view // refresh may have installed a newer one meanwhile
	s.mu.Unlock()
	now = s.now()
	if idx := s.routes.idx.Load(); idx.current(v, now) || (idx != nil && idx.seq > began && idx.view == v && !now.Before(idx.builtAt)) {
		return idx, nil
	}
	return s.storeRouteIndex(v, now), nil
}

// kickRoutes asks the route builder for a build (at most one pending).
func (s *Server) kickRoutes() {
	select {
	case s.routes.kick <- struct{}{}:
	default:
	}
}

// rebuildRoutes builds the index of the current snapshot unless the one
// installed answers for it now: the route builder's step.
func (s *Server) rebuildRoutes() {
	s.routes.buildMu.Lock()
	defer s.routes.buildMu.Unlock()
	s.mu.Lock()
	v := s.view
	s.mu.Unlock()
	if now := s.now(); !s.routes.idx.Load().current(v, now) && !v.at.IsZero() {
		s.storeRouteIndex(v, now)
	}
}

// runRoutes is the route builder: it builds the index when asked
// (kickRoutes) and when a listed node falls silent (validUntil), until
// ctx is done.
func (s *Server) runRoutes(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := time.Hour
		if idx := s.routes.idx.Load(); idx != nil && idx.validUntil != math.MaxInt64 {
			wait = max(time.Duration(idx.validUntil-s.now().UnixMilli())*time.Millisecond, time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.routes.kick:
		case <-t.C:
		}
		s.rebuildRoutes()
	}
}

// routeHeartbeat tells the index that id heartbeat: a node it left out
// for silence makes it stale, and the route builder builds it again.
func (s *Server) routeHeartbeat(id string) {
	if idx := s.routes.idx.Load(); idx != nil && idx.revivable[id] && !idx.stale.Swap(true) {
		s.kickRoutes()
	}
}
