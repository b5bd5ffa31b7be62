package master

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"

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

// route computes a Route answer from a registry snapshot. Only nodes that
// heartbeat and are judged healthy are listed. Primary is the caller's
// region when it has a healthy node, otherwise the region with the most
// healthy nodes (reason says why); secondary is the best other region, so
// the two lists never share a region. It fails with UNAVAILABLE
// (reason no_healthy_nodes) when no node of the role is healthy.
func route(entries []*entry, now time.Time, missedAfter time.Duration, role, region string) (*willowv1.RouteResponse, error) {
	byRegion := map[string][]*entry{}
	for _, e := range entries {
		if e.info.GetRole() != role {
			continue
		}
		if st, _, _ := e.state(now, missedAfter); st != StateHealthy {
			continue
		}
		byRegion[e.info.GetRegion()] = append(byRegion[e.info.GetRegion()], e)
	}
	if len(byRegion) == 0 {
		return nil, rpcstatus.New(codes.Unavailable, ReasonNoHealthyNodes, "no healthy %s node in any region", role)
	}
	// Regions other than the caller's, best first: most healthy nodes,
	// then name.
	others := make([]string, 0, len(byRegion))
	for r := range byRegion {
		if r != region {
			others = append(others, r)
		}
	}
	sort.Slice(others, func(i, j int) bool {
		a, b := others[i], others[j]
		if len(byRegion[a]) != len(byRegion[b]) {
			return len(byRegion[a]) > len(byRegion[b])
		}
		return a < b
	})
	resp := &willowv1.RouteResponse{}
	if _, ok := byRegion[region]; ok {
		resp.PrimaryRegion = region
	} else {
		resp.PrimaryRegion, others = others[0], others[1:]
		if region == "" {
			resp.Reason = fmt.Sprintf("no caller region given; primary is region %s", resp.PrimaryRegion)
		} else {
			resp.Reason = fmt.Sprintf("region %s has no healthy %s node; primary is region %s", region, role, resp.PrimaryRegion)
		}
	}
	resp.Primary = endpoints(byRegion[resp.PrimaryRegion])
	if len(others) > 0 {
		resp.SecondaryRegion = others[0]
		resp.Secondary = endpoints(byRegion[resp.SecondaryRegion])
	}
	return resp, nil
}

func endpoints(es []*entry) []*willowv1.Endpoint {
	sort.Slice(es, func(i, j int) bool {
		a, b := loadScore(es[i]), loadScore(es[j])
		if a != b {
			return a < b
		}
		if ca, cb := es[i].load.GetCpu(), es[j].load.GetCpu(); ca != cb {
			return ca < cb
		}
		return es[i].info.GetId() < es[j].info.GetId()
	})
	out := make([]*willowv1.Endpoint, 0, len(es))
	for _, e := range es {
		out = append(out, &willowv1.Endpoint{
			NodeId: e.info.GetId(), Addr: e.info.GetAddr(), HttpAddr: e.info.GetHttpAddr(),
			Region: e.info.GetRegion(), Load: loadScore(e),
		})
	}
	return out
}

// Route answers where a client of a region should send a role's requests:
// a primary and a secondary list from different regions, the flex
// snapshot and how long the answer may be cached. It answers from the
// master's cached registry snapshot, so it keeps answering while Redis is
// briefly down. Errors: INVALID_ARGUMENT (role) without a role,
// UNAVAILABLE (no_healthy_nodes) when no node of the role is healthy.
func (s *Server) Route(ctx context.Context, req *willowv1.RouteRequest) (*willowv1.RouteResponse, error) {
	if req.GetRole() == "" {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonRole, "route: role missing")
	}
	v, err := s.cachedRole(ctx, req.GetRole())
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "route: %v", err)
	}
	resp, err := route(v.entries, s.now(), s.cfg.MissedAfter, req.GetRole(), req.GetRegion())
	s.met.route(req.GetRole(), err)
	if err != nil {
		return nil, err
	}
	resp.Flex = s.flexSnapshot()
	resp.TtlMs = s.cfg.RouteTTL.Milliseconds()
	return resp, nil
}
