package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"willow/internal/cpustat"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"willow/internal/iostat"
	willowv1 "willow/proto/willow/v1"
)

// stats counts requests for the load reported in heartbeats.
type stats struct {
	inFlight atomic.Int32
	requests atomic.Int64 // since the last heartbeat
	errors   atomic.Int64 // since the last heartbeat
	latency  latencyHist  // durations since the last heartbeat

	mu      sync.Mutex // guards lastCPU and lastAt
	lastCPU time.Duration
	lastAt  time.Time
}

func newStats() *stats { return &stats{lastAt: time.Now(), lastCPU: cpustat.Process()} }

// ServerFault reports whether an RPC error counts against the node's
// success rate: client mistakes (bad input, not found, auth) and
// shedding's refusals do not.
func ServerFault(err error) bool {
	if err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.Unauthenticated,
		codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange, codes.Canceled,
		codes.ResourceExhausted:
		return false
	}
	return true
}

func isHealthCheck(method string) bool {
	return method == grpc_health_v1.Health_Check_FullMethodName || method == grpc_health_v1.Health_Watch_FullMethodName
}

// done counts one finished call that took d and ended with err.
func (s *stats) done(d time.Duration, err error) {
	s.latency.observe(d)
	s.requests.Add(1)
	if ServerFault(err) {
		s.errors.Add(1)
	}
}

// load takes the figures for one heartbeat and resets the window.
func (n *Node) load() *willowv1.Load {
	req := n.stats.requests.Swap(0)
	errs := n.stats.errors.Swap(0)
	l := &willowv1.Load{InFlight: n.stats.inFlight.Load(), Requests: req, Errors: errs, SuccessRate: 1,
		LatencyP99Ms: n.stats.latency.p99()}
	if req > 0 {
		l.SuccessRate = float64(req-errs) / float64(req)
	}
	n.stats.mu.Lock()
	now, cpu := time.Now(), cpustat.Process()
	if el := now.Sub(n.stats.lastAt); el > 0 {
		l.Cpu = float64(cpu-n.stats.lastCPU) / float64(el)
	}
	n.stats.lastAt, n.stats.lastCPU = now, cpu
	n.stats.mu.Unlock()
	if n.cfg.QueueMs != nil {
		l.QueueMs = n.cfg.QueueMs()
	}
	if n.cfg.Gauges != nil {
		l.Gauges = n.cfg.Gauges()
	}
	if rss := rssBytes(); rss > 0 {
		if l.Gauges == nil {
			l.Gauges = map[string]float64{}
		}
		l.Gauges["mem_rss_bytes"] = rss
		l.RssBytes = int64(rss)
	}
	// The node's servers' traffic plus the process's dialed connections
	// (store, Redis, other nodes).
	l.NetBytesIn, l.NetBytesOut = n.net.in.Load()+iostat.DialedIn(), n.net.out.Load()+iostat.DialedOut()
	l.DiskBytesWritten, l.Fsyncs = iostat.Written(), iostat.Fsyncs()
	l.SharedProcess = n.cfg.SharedProcess
	n.applyHooks(l)
	return l
}

// setDrills installs the drills the master ordered for this node.
func (n *Node) setDrills(ds []*willowv1.Drill) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.drills = ds
	n.hasDrills.Store(len(ds) > 0)
}

// activeDrills returns the unexpired drills of kind.
func (n *Node) activeDrill(kind string) *willowv1.Drill {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.cfg.Now().UnixMilli()
	for _, d := range n.drills {
		if d.GetKind() == kind && (d.GetExpiresAtUnixMs() == 0 || d.GetExpiresAtUnixMs() > now) {
			return d
		}
	}
	return nil
}

// Drills returns the drills this node currently runs.
func (n *Node) Drills() []*willowv1.Drill {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*willowv1.Drill(nil), n.drills...)
}

// drillFault applies latency and error drills to one request.
func (n *Node) drillFault(ctx context.Context, method string) error {
	if !n.hasDrills.Load() || isHealthCheck(method) || n.cfg.Role == "master" {
		return nil
	}
	if d := n.activeDrill("latency"); d != nil && d.GetLatencyMs() > 0 {
		t := time.NewTimer(time.Duration(d.GetLatencyMs()) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if d := n.activeDrill("errors"); d != nil && rand.Float64() < d.GetErrorRatio() {
		return status.Error(codes.Unavailable, "drill: injected error")
	}
	return nil
}

// rssBytes is the process's resident set size, from /proc/self/statm.
func rssBytes() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		return 0
	}
	return float64(rss * int64(os.Getpagesize()))
}
