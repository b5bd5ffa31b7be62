package master

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"willow/node"
)

// Prober health-checks a node at its gRPC address. It returns nil when
// the node answers SERVING.
type Prober interface {
	Probe(ctx context.Context, addr string) error
}

// grpcProber probes with the standard gRPC health Check over one cached
// connection per address.
type grpcProber struct {
	tls   *tls.Config
	mu    sync.Mutex // guards conns
	conns map[string]*grpc.ClientConn
}

var _ Prober = (*grpcProber)(nil)

func newGRPCProber(tlsCfg *tls.Config) *grpcProber {
	return &grpcProber{tls: tlsCfg, conns: map[string]*grpc.ClientConn{}}
}

func (p *grpcProber) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := node.Dial(addr, p.tls)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// Probe implements Prober.
func (p *grpcProber) Probe(ctx context.Context, addr string) error {
	c, err := p.conn(addr)
	if err != nil {
		return err
	}
	resp, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health check %s: %w", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check %s: %s", addr, resp.GetStatus())
	}
	return nil
}

// retain closes the connections to addresses not in keep.
func (p *grpcProber) retain(keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		if !keep[a] {
			c.Close()
			delete(p.conns, a)
		}
	}
}

// Close closes every connection.
func (p *grpcProber) Close() { p.retain(nil) }

// leaseScript takes or renews the leader lease: it succeeds when the key
// is free or already held by this master.
var leaseScript = redis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0`)

// lease takes or renews the leader lease.
func (s *Server) lease(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, s.ctl, []string{s.key("leader")}, s.cfg.ID, s.cfg.LeaseTTL.Milliseconds()).Int()
	return n == 1, err
}

// runLeader probes and judges nodes every ProbeInterval while this master
// holds the leader lease; other masters only take over when it lapses.
func (s *Server) runLeader(ctx context.Context) {
	t := time.NewTicker(s.cfg.ProbeInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeInterval)
		lead, err := s.lease(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("leader lease", "err", err)
		}
		s.setLeader(lead && err == nil)
		if lead && err == nil {
			if err := s.judgeOnce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("judge nodes", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			if s.isLeader() {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = releaseScript.Run(rctx, s.ctl, []string{s.key("leader")}, s.cfg.ID).Err()
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

func (s *Server) setLeader(b bool) {
	s.mu.Lock()
	changed := s.leader != b
	s.leader = b
	s.mu.Unlock()
	if changed {
		s.log.Info("master leadership", "leader", b, "id", s.cfg.ID)
		s.met.leader(b)
	}
}

func (s *Server) isLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

// judgeOnce loads the registry, probes the nodes that need it, and writes
// the health judgements that changed.
func (s *Server) judgeOnce(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	v, err := s.loadView(rctx)
	cancel()
	if err != nil {
		return err
	}
	v = s.withSeen(v)
	now := s.now()
	// Right after this master starts or Redis comes back, heartbeats other
	// masters received may not be in Redis yet: judge nobody dead until
	// Redis has answered for MissedAfter.
	deadOK := s.redisUpFor() >= s.cfg.MissedAfter
	probed := s.probeAll(ctx, v.entries, now)
	changed := s.cfg.judge(v.entries, probed, now, deadOK)
	if len(changed) == 0 {
		return s.cleanDrills(ctx, now)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.writeHealth(wctx, changed); err != nil {
		return fmt.Errorf("master: write health: %w", err)
	}
	for _, e := range v.entries {
		h, ok := changed[e.info.GetId()]
		if !ok || h.State == e.h.State {
			continue
		}
		s.log.Info("node state", "id", e.info.GetId(), "role", e.info.GetRole(), "region", e.info.GetRegion(),
			"from", e.h.State, "to", h.State, "reason", h.Reason)
		s.met.transition(h)
	}
	return s.cleanDrills(ctx, now)
}

// probeAll health-checks, concurrently, every live node that is probing
// or out of its protection window, and the healthy ones whose turn it is
// (ProbeBudget of them a round, taking turns in ID order).
func (s *Server) probeAll(ctx context.Context, es []*entry, now time.Time) map[string]error {
	out := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	keep := map[string]bool{}
	var healthy, others []*entry
	for _, e := range es {
		if !e.alive(now, s.cfg.MissedAfter) {
			continue
		}
		if e.h.State == StateEjected && now.UnixMilli() < e.h.ProtectUntilMs {
			continue
		}
		keep[e.info.GetAddr()] = true
		if e.h.State == "" || e.h.State == StateHealthy {
			healthy = append(healthy, e)
		} else {
			others = append(others, e)
		}
	}
	if len(healthy) > s.cfg.ProbeBudget {
		sort.Slice(healthy, func(i, j int) bool { return healthy[i].info.GetId() < healthy[j].info.GetId() })
		from := s.probeAt % len(healthy)
		turn := make([]*entry, 0, s.cfg.ProbeBudget)
		for i := range s.cfg.ProbeBudget {
			turn = append(turn, healthy[(from+i)%len(healthy)])
		}
		s.probeAt = from + s.cfg.ProbeBudget
		healthy = turn
	}
	for _, e := range append(others, healthy...) {
		addr := e.info.GetAddr()
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
			err := s.prober.Probe(pctx, addr)
			cancel()
			mu.Lock()
			out[id] = err
			mu.Unlock()
		}(e.info.GetId())
	}
	wg.Wait()
	if p, ok := s.prober.(*grpcProber); ok {
		p.retain(keep)
	}
	return out
}

// maxEjected is how many of n live nodes of one role in one region may be
// ejected at once for bad health: floor(n × fraction), at least 1, but
// never all of them (so 0 for a lone node, 1 of 2, 1 of 3, 2 of 6 with
// the default third). Dead nodes are not counted and always leave.
func maxEjected(n int, fraction float64) int {
	if n <= 1 {
		return 0
	}
	k := int(math.Floor(float64(n)*fraction + 1e-9))
	return min(n-1, max(1, k))
}

// judge applies the ejection and recovery rules to a registry snapshot
// and the probe results of this round; it returns the health records that
// changed, by node ID. Unless deadOK, nodes without recent heartbeats are
// left as they are (Route leaves them out anyway).
func (c *Config) judge(es []*entry, probed map[string]error, now time.Time, deadOK bool) map[string]health {
	nowMs := now.UnixMilli()
	changed := map[string]health{}
	eject := func(h health, reason string, fromProbing bool) health {
		switch {
		case fromProbing:
			h.Strikes++
		case h.RecoveredMs > 0 && nowMs-h.RecoveredMs < c.FlapMemory.Milliseconds():
			h.Strikes++
		default:
			h.Strikes = 0
		}
		prot := c.Protection
		for i := 0; i < h.Strikes && prot < c.MaxProtection; i++ {
			prot *= 2
		}
		prot = min(prot, c.MaxProtection)
		h.State, h.SinceMs, h.Reason = StateEjected, nowMs, reason
		h.ProtectUntilMs = nowMs + prot.Milliseconds()
		h.ProbeOK, h.ProbeFail = 0, 0
		return h
	}
	type group struct{ live, out int }
	groups := map[string]*group{}
	type candidate struct {
		e      *entry
		h      health
		reason string
		rate   float64
	}
	var cands []candidate
	for _, e := range es {
		id := e.info.GetId()
		h := e.h
		if h.State == "" {
			h = health{State: StateHealthy, SinceMs: e.lastMs}
		}
		orig := h
		gk := e.info.GetRole() + "\x00" + e.info.GetRegion()
		if !e.alive(now, c.MissedAfter) {
			if !deadOK {
				continue
			}
			if h.State != StateEjected {
				changed[id] = eject(h, ReasonMissedHeartbeats, h.State == StateProbing)
			} else if h.ProbeOK != 0 {
				h.ProbeOK = 0
				changed[id] = h
			}
			continue
		}
		g := groups[gk]
		if g == nil {
			g = &group{}
			groups[gk] = g
		}
		g.live++
		perr, wasProbed := probed[id]
		switch h.State {
		case StateEjected:
			if nowMs >= h.ProtectUntilMs {
				h.State, h.SinceMs, h.ProbeOK = StateProbing, nowMs, 0
				if wasProbed && perr == nil {
					h.ProbeOK = 1
				}
			}
			if h.State == StateProbing && h.ProbeOK >= c.ProbeSuccesses {
				h.State, h.SinceMs, h.Reason, h.RecoveredMs = StateHealthy, nowMs, "", nowMs
			}
		case StateProbing:
			switch {
			case !wasProbed:
			case perr != nil:
				h = eject(h, ReasonProbeFailed+": "+perr.Error(), true)
			default:
				h.ProbeOK++
				if h.ProbeOK >= c.ProbeSuccesses {
					h.State, h.SinceMs, h.Reason, h.RecoveredMs, h.ProbeOK = StateHealthy, nowMs, "", nowMs, 0
				}
			}
		case StateHealthy:
			if wasProbed {
				if perr != nil {
					h.ProbeFail++
				} else {
					h.ProbeFail = 0
				}
			}
			from := max(nowMs-c.SuccessWindow.Milliseconds(), h.SinceMs)
			req, errs := window(e.samples, from)
			rate := 1.0
			if req > 0 {
				rate = float64(req-errs) / float64(req)
			}
			switch {
			case req >= c.MinRequests && rate <= c.MinSuccessRate:
				cands = append(cands, candidate{e, h, fmt.Sprintf("%s %.2f over %d requests", ReasonSuccessRate, rate, req), rate})
			case h.ProbeFail >= c.ProbeFailures:
				msg := ReasonProbeFailed
				if perr != nil {
					msg += ": " + perr.Error()
				}
				cands = append(cands, candidate{e, h, msg, 0})
			}
		}
		if h.State != StateHealthy {
			g.out++
		}
		if h != orig {
			changed[id] = h
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].rate != cands[j].rate {
			return cands[i].rate < cands[j].rate
		}
		return cands[i].e.info.GetId() < cands[j].e.info.GetId()
	})
	for _, cd := range cands {
		g := groups[cd.e.info.GetRole()+"\x00"+cd.e.info.GetRegion()]
		if g.out >= maxEjected(g.live, c.MaxEjectFraction) {
			continue // the region keeps this node: one bad judgement cannot empty it
		}
		g.out++
		changed[cd.e.info.GetId()] = eject(cd.h, cd.reason, false)
	}
	return changed
}
