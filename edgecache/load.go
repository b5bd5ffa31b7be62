package edgecache

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	willowv1 "willow/proto/willow/v1"
)

// bytesOutRate fills the heartbeat's Load.bytes_out_per_s (auto-flex's
// edge_bytes_out_per_s signal): the body bytes this edge served over HTTP
// and gRPC per second since the previous heartbeat, from the counters of
// willow_edgecache_bytes_served_total. Reading them once a heartbeat keeps
// the hit path as it is.
type bytesOutRate struct {
	counters []prometheus.Counter
	mu       sync.Mutex // guards last, at
	last     float64
	at       time.Time
}

func newBytesOutRate(m *metrics) *bytesOutRate {
	return &bytesOutRate{counters: []prometheus.Counter{m.bytesHTTP, m.bytesGRPC}}
}

func (b *bytesOutRate) total() float64 {
	var sum float64
	for _, c := range b.counters {
		var m dto.Metric
		if c.Write(&m) == nil {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// fill sets l.BytesOutPerS; the first heartbeat reports 0.
func (b *bytesOutRate) fill(l *willowv1.Load, now time.Time) {
	v := b.total()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && now.After(b.at) && v >= b.last {
		l.BytesOutPerS = (v - b.last) / now.Sub(b.at).Seconds()
	}
	b.last, b.at = v, now
}
