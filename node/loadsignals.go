package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// loadHooks are the services' additions to the heartbeat's Load.
type loadHooks struct {
	mu  sync.Mutex // guards fns
	fns []func(*willowv1.Load)
}

// AddLoad makes every heartbeat's Load pass through f, which fills the
// service's own figures (the auto-flex signals: queue p99, backlog, store
// writes/s, bytes out/s). f runs on the heartbeat goroutine.
func (n *Node) AddLoad(f func(*willowv1.Load)) {
	n.hooks.mu.Lock()
	defer n.hooks.mu.Unlock()
	n.hooks.fns = append(n.hooks.fns, f)
}

// applyHooks runs the services' hooks and adds the shedder's admitted
// share on l.
func (n *Node) applyHooks(l *willowv1.Load) {
	if n.shedder != nil {
		l.AdmitFraction = n.shedder.AdmitFraction()
	}
	n.hooks.mu.Lock()
	fns := slices.Clone(n.hooks.fns)
	n.hooks.mu.Unlock()
	for _, f := range fns {
		f(l)
	}
}

// Heartbeat gauges of an upload front's finished uploads, per second
// since its previous heartbeat, whatever the protocol (gRPC, tus, IETF).
// The console's upload trends read them: a front's gRPC request count
// also counts Begin, Chunks, Status and buffer calls, several per upload.
const (
	GaugeUploadsPerS        = "uploads_per_s"         // commits that succeeded (duplicates too)
	GaugeUploadFailuresPerS = "upload_failures_per_s" // commits that failed on the front's side
	// GaugeUploadsBegunPerS is the arrivals: new uploads staged on the
	// front (a resumed or duplicate Begin is not new), before their bytes,
	// whatever becomes of them. Auto-flex forecasts compress from it.
	GaugeUploadsBegunPerS = "uploads_begun_per_s"
)

// RateCounter counts events and reports their rate per second between two
// reads: a heartbeat's "per second over the last window".
type RateCounter struct {
	n    atomic.Int64
	mu   sync.Mutex // guards last
	last time.Time
}

// Add counts k events.
func (c *RateCounter) Add(k int64) { c.n.Add(k) }

// Rate returns the events per second since the previous call and resets
// the count (0 on the first call).
func (c *RateCounter) Rate(now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.n.Swap(0)
	prev := c.last
	c.last = now
	if prev.IsZero() || !now.After(prev) {
		return 0
	}
	return float64(k) / now.Sub(prev).Seconds()
}
