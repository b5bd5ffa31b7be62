package master

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
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
	// wires is the encoded answer by wireKey (a caller region listed, or
	// "", and a list cap up to routeWireCacheMax), made at its first
	// Route call (wire).
	wires sync.Map
}

// MaxRoutePerList is the largest max_per_list a Route call may ask for
// (INVALID_ARGUMENT max_per_list above it or below 0): a list of more
// than that is asked for with 0, every endpoint.
const MaxRoutePerList = 10000

// routeWireCacheMax is the largest list cap whose encoded answer the
// index keeps (with every endpoint, 0): the SDK asks for a few
// (client.DefaultCallPerList), and a caller asking for many costs its own
// encoding rather than a cache entry per cap.
const routeWireCacheMax = 16

// wireKey names one encoded answer of roleRoutes.wires: the caller's
// region and the cap on each list (0: every endpoint).
type wireKey struct {
	region  string
	perList int
}

// newRoleRoutes lists one role's nodes, by region, as Route lists them.
// until is each node's last heartbeat plus MissedAfter (unix ms), kept
// with the endpoints for the route index (route_index.go).
func newRoleRoutes(byRegion map[string][]*entry, until func(*entry) int64) *roleRoutes {
	r := &roleRoutes{regions: make([]string, 0, len(byRegion)), eps: make(map[string][]*willowv1.Endpoint, len(byRegion)),
		until: make(map[string][]int64, len(byRegion)), minUntil: math.MaxInt64}
	for reg, es := range byRegion {
		r.regions = append(r.regions, reg)
		eps := endpoints(es)
		r.eps[reg] = eps[:len(eps):len(eps)]
		u := make([]int64, len(es))
		for i, e := range es { // endpoints sorted es
			u[i] = until(e)
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

// answer is the Route answer for a caller in region, each list cut to
// its first perList endpoints (the least loaded) when perList > 0 (Flex
// and TtlMs unset). The endpoints are shared by every answer: read-only.
func (r *roleRoutes) answer(role, region string, perList int) (*willowv1.RouteResponse, error) {
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
	if perList > 0 {
		resp.Primary = resp.Primary[:min(perList, len(resp.Primary))]
		resp.Secondary = resp.Secondary[:min(perList, len(resp.Secondary))]
	}
	return resp, nil
}

// wire is the answer for a caller in region with each list cut to
// perList endpoints (0: every one), encoded (Flex and TtlMs unset). The
// index keeps it for a region it lists and for no region, with every
// endpoint or a cap up to routeWireCacheMax, so its Route calls share one
// encoding: at N = 5000 an answer with every endpoint lists about 1300
// of them (65 KB), and marshalling it was about 0.3 ms of every call
// (BenchmarkFleet). A cap no shorter than the longest list is the answer
// with every endpoint.
func (r *roleRoutes) wire(role, region string, perList int) ([]byte, error) {
	if r == nil {
		_, err := r.answer(role, region, 0) // no healthy node
		return nil, err
	}
	if len(r.regions) > 0 && perList >= len(r.eps[r.regions[0]]) { // regions[0] has the most
		perList = 0
	}
	key := wireKey{region, perList}
	if b, ok := r.wires.Load(key); ok {
		return b.([]byte), nil
	}
	resp, err := r.answer(role, region, perList)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return nil, rpcstatus.New(codes.Internal, rpcstatus.ReasonInternal, "route: encode: %v", err)
	}
	if _, listed := r.eps[region]; (listed || region == "") && perList <= routeWireCacheMax {
		r.wires.Store(key, b)
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
	slices.SortFunc(sc, func(a, b scored) int {
		if a.load != b.load {
			return cmp.Compare(a.load, b.load)
		}
		if ca, cb := a.e.load.GetCpu(), b.e.load.GetCpu(); ca != cb {
			return cmp.Compare(ca, cb)
		}
		return strings.Compare(a.e.info.GetId(), b.e.info.GetId())
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
// snapshot and how long the answer may be cached. With max_per_list > 0
// each list holds at most that many endpoints, the least loaded first
// (the two lists, from different regions, are still both there). It
// answers from the master's in-memory route index (route_index.go), built
// from the cached registry snapshot, so it keeps answering while Redis is
// briefly down. Errors: INVALID_ARGUMENT (role) without a role,
// INVALID_ARGUMENT (max_per_list) for a cap below 0 or above
// MaxRoutePerList, UNAVAILABLE (no_healthy_nodes) when no node of the
// role is healthy.
func (s *Server) Route(ctx context.Context, req *willowv1.RouteRequest) (*willowv1.RouteResponse, error) {
	if req.GetRole() == "" {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonRole, "route: role missing")
	}
	if n := req.GetMaxPerList(); n < 0 || n > MaxRoutePerList {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonMaxPerList, "route: max_per_list %d outside 0..%d (0: every endpoint)", n, MaxRoutePerList)
	}
	idx, err := s.routeIndex(ctx)
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "route: %v", err)
	}
	b, err := idx.wire(req.GetRole(), req.GetRegion(), int(req.GetMaxPerList()), s.now(), s.hb.seenMs)
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
