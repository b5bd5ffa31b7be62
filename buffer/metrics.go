package buffer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the pool's Prometheus series, all labelled pool=Name.
type metrics struct {
	appends prometheus.Counter
	deletes prometheus.Counter
	corrupt prometheus.Counter

	all []prometheus.Collector
	reg prometheus.Registerer // nil until registered
}

func newMetrics(p *Pool) *metrics {
	m := &metrics{
		appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "willow_buffer_appends_total", Help: "Blobs appended to the buffer pool.",
		}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "willow_buffer_deletes_total", Help: "Blobs deleted from the buffer pool.",
		}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "willow_buffer_corrupt_records_truncated_total",
			Help: "Torn or corrupt records found by recovery and truncated or dropped.",
		}),
	}
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(p.Stats()) })
	}
	m.all = []prometheus.Collector{
		m.appends, m.deletes, m.corrupt,
		gauge("willow_buffer_items", "Live blobs in the buffer pool.", func(s Stats) float64 { return float64(s.Items) }),
		gauge("willow_buffer_bytes", "Bytes of live blobs in the buffer pool.", func(s Stats) float64 { return float64(s.Bytes) }),
		gauge("willow_buffer_dead_bytes", "On-disk bytes Compact can reclaim.", func(s Stats) float64 { return float64(s.DeadBytes) }),
		gauge("willow_buffer_segments", "Segment files of the buffer pool.", func(s Stats) float64 { return float64(s.Segments) }),
		gauge("willow_buffer_oldest_item_age_seconds", "Age of the oldest live blob; 0 when empty.", func(s Stats) float64 {
			if s.OldestAppendedAt.IsZero() {
				return 0
			}
			return p.opts.Now().Sub(s.OldestAppendedAt).Seconds()
		}),
	}
	return m
}

// register adds every series to r labelled pool=name; on a failure it
// takes back what it added.
func (m *metrics) register(r prometheus.Registerer, name string) error {
	if r == nil {
		return nil
	}
	w := prometheus.WrapRegistererWith(prometheus.Labels{"pool": name}, r)
	for i, c := range m.all {
		if err := w.Register(c); err != nil {
			for _, done := range m.all[:i] {
				w.Unregister(done)
			}
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	m.reg = w
	return nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.all {
		m.reg.Unregister(c)
	}
	m.reg = nil
}
