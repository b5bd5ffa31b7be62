package master

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

// loadScore orders endpoints, least loaded first: in-flight requests plus
// one per 10 ms of mean queueing time, per unit of capacity.
func loadScore(e *entry) float64 {
	c := float64(e.info.GetCapacity())
	if c <= 0 {
		c = 1
	}
	return (float64(e.load.GetInFlight()) + e.load.GetQueueMs()/10) / c
}

// roleRoutes is one role's healthy nodes, by region, as Route lists them.
type roleRoutes struct {
	// regions best first: most healthy nodes, then name.
	regions []string
	// eps is each region's endpoints, least loaded first (each slice at
	// full capacity: a caller appending to it gets a copy).
	eps map[string][]*willowv1.Endpoint
	// until is each endpoint's last heartbeat plus MissedAfter (unix
	// ms), in the order of eps; minUntil the least.
	until    map[string][]int64
	minUntil int64
	// wires is the encoded answer by caller region (a region listed, or
	// ""), made at its first Route call (wire).
	wires sync.Map
}

// newRoleRoutes lists one role's nodes, by region, as Route lists them.
// until is each node's last heartbeat plus MissedAfter (unix ms), kept
// with the endpoints for the route index (route_index.go).
func newRoleRoutes(byRegion map[string][]*entry, until map[*entry]int64) *roleRoutes {
	r := &roleRoutes{regions: make([]string, 0, len(byRegion)), eps: make(map[string][]*willowv1.Endpoint, len(byRegion)),
		until: make(map[string][]int64, len(byRegion)), minUntil: math.MaxInt64}
	for reg, es := range byRegion {
		r.regions = append(r.regions, reg)
		eps := endpoints(es)
		r.eps[reg] = eps[:len(eps):len(eps)]
		u := make([]int64, len(es))
		for i, e := range es { // endpoints sorted es
			u[i] = until[e]
			r.minUntil = min(r.minUntil, u[i])
		}
		r.until[reg] = u
	}
	sortRegions(r)
	return r
}

// sortRegions orders r's regions best first: most healthy nodes, then name.
func sortRegions(r *roleRoutes) {
	sort.Slice(r.regions, func(i, j int) bool {
		a, b := r.regions[i], r.regions[j]
		if len(r.eps[a]) != len(r.eps[b]) {
			return len(r.eps[a]) > len(r.eps[b])
		}
		return a < b
	})
}

// answer is the Route answer for a caller in region (Flex and TtlMs
// unset). The endpoints are shared by every answer: read-only.
func (r *roleRoutes) answer(role, region string) (*willowv1.RouteResponse, error) {
	if r == nil || len(r.regions) == 0 {
		return nil, rpcstatus.New(codes.Unavailable, ReasonNoHealthyNodes, "no healthy %s node in any region", role)
	}
	resp := &willowv1.RouteResponse{}
	if _, ok := r.eps[region]; ok {
		resp.PrimaryRegion = region
	} else {
		resp.PrimaryRegion = r.regions[0]
		if region == "" {
			resp.Reason = fmt.Sprintf("no caller region given; primary is region %s", resp.PrimaryRegion)
		} else {
			resp.Reason = fmt.Sprintf("region %s has no healthy %s node; primary is region %s", region, role, resp.PrimaryRegion)
		}
	}
	resp.Primary = r.eps[resp.PrimaryRegion]
	for _, reg := range r.regions { // the best other region
		if reg != resp.PrimaryRegion {
			resp.SecondaryRegion, resp.Secondary = reg, r.eps[reg]
			break
		}
	}
	return resp, nil
}

// wire is the answer for a caller in region, encoded (Flex and TtlMs
// unset). The index keeps it for a region it lists and for no region, so
// its Route calls share one encoding: at N = 5000 an answer lists about
// 1300 endpoints (65 KB), and marshalling it was about 0.3 ms of every
// call (BenchmarkFleet).
func (r *roleRoutes) wire(role, region string) ([]byte, error) {
	if r == nil {
		_, err := r.answer(role, region) // no healthy node
		return nil, err
	}
	if b, ok := r.wires.Load(region); ok {
		return b.([]byte), nil
	}
	resp, err := r.answer(role, region)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return nil, rpcstatus.New(codes.Internal, rpcstatus.ReasonInternal, "route: encode: %v", err)
	}
	if _, listed := r.eps[region]; listed || region == "" {
		r.wires.Store(region, b)
	}
	return b, nil
}

// endpoints sorts es least loaded first and returns their endpoints (one
// allocation for all of them: the index builds them four times a second).
func endpoints(es []*entry) []*willowv1.Endpoint {
	type scored struct {
		e    *entry
		load float64
	}
	sc := make([]scored, len(es))
	for i, e := range es {
		sc[i] = scored{e, loadScore(e)}
	}
	sort.Slice(sc, func(i, j int) bool {
		a, b := sc[i], sc[j]
		if a.load != b.load {
			return a.load < b.load
		}
		if ca, cb := a.e.load.GetCpu(), b.e.load.GetCpu(); ca != cb {
			return ca < cb
		}
		return a.e.info.GetId() < b.e.info.GetId()
	})
	all := make([]willowv1.Endpoint, len(sc))
	out := make([]*willowv1.Endpoint, len(sc))
	for i, x := range sc {
		es[i] = x.e
		ep := &all[i]
		ep.NodeId, ep.Addr, ep.HttpAddr = x.e.info.GetId(), x.e.info.GetAddr(), x.e.info.GetHttpAddr()
		ep.Region, ep.Load = x.e.info.GetRegion(), x.load
		out[i] = ep
	}
	return out
}

// Route answers where a client of a region should send a role's requests:
// a primary and a secondary list from different regions, the flex
// snapshot and how long the answer may be cached. It answers from the
// master's in-memory route index (route_index.go), built from the cached
// registry snapshot, so it keeps answering while Redis is briefly down.
// Errors: INVALID_ARGUMENT (role) without a role, UNAVAILABLE
// (no_healthy_nodes) when no node of the role is healthy.
func (s *Server) Route(ctx context.Context, req *willowv1.RouteRequest) (*willowv1.RouteResponse, error) {
	if req.GetRole() == "" {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonRole, "route: role missing")
	}
	idx, err := s.routeIndex(ctx)
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "route: %v", err)
	}
	b, err := idx.wire(req.GetRole(), req.GetRegion(), s.now(), s.hb.seenMs)
	s.met.route(req.GetRole(), err)
	if err != nil {
		return nil, err
	}
	// The lists and regions go out as the index encoded them: carried as
	// the message's unknown fields, written as they are, they decode as
	// the fields they are. So the response's own Primary, Secondary and
	// regions are empty on this side; only the encoded message has them.
	resp := &willowv1.RouteResponse{Flex: s.flexSnapshot(), TtlMs: s.cfg.RouteTTL.Milliseconds()}
	resp.ProtoReflect().SetUnknown(b)
	return resp, nil
}
