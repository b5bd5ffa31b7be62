package shedding

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the Shedder's Prometheus series, resolved per business
// index up front so the hot path does no label lookups.
type metrics struct {
	admitted   []prometheus.Counter
	rej        []map[string]prometheus.Counter // by reason
	def        []map[string]prometheus.Counter // by reason
	queue      []prometheus.Observer
	level      prometheus.Gauge
	overloaded prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, s *Shedder) (*metrics, error) {
	admitted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_shedding_admitted_total",
		Help: "Requests admitted by the shedder, by business.",
	}, []string{"business"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_shedding_rejected_total",
		Help: "Requests rejected by the shedder, by business and reason.",
	}, []string{"business", "reason"})
	deferred := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_shedding_deferred_total",
		Help: "Requests of Deferred methods that admission would have shed, handed to the handler, by business and reason.",
	}, []string{"business", "reason"})
	queue := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "willow_shedding_queue_seconds",
		Help:    "Time requests waited for a concurrency slot, by business.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1},
	}, []string{"business"})
	level := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "willow_shedding_admit_level",
		Help: "Current admission level ((business priority-1)*128 + user priority admitted up to it).",
	})
	overloaded := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "willow_shedding_overloaded",
		Help: "1 when the last window was overloaded.",
	})
	for _, c := range []prometheus.Collector{admitted, rejected, deferred, queue, level, overloaded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	names := make([]string, s.nBiz)
	for i := range names {
		names[i] = "unknown"
	}
	// Businesses sharing a priority share series under the first name in
	// sorted order would be ambiguous; label them jointly instead.
	for b, p := range s.prio {
		if names[p-1] == "unknown" {
			names[p-1] = b
		} else if b < names[p-1] {
			names[p-1] = b + "," + names[p-1]
		} else {
			names[p-1] += "," + b
		}
	}
	m := &metrics{level: level, overloaded: overloaded}
	for _, n := range names {
		m.admitted = append(m.admitted, admitted.WithLabelValues(n))
		m.queue = append(m.queue, queue.WithLabelValues(n))
		rj, df := map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
		for _, r := range []string{ReasonShedRatio, ReasonOverload} {
			rj[r] = rejected.WithLabelValues(n, r)
			df[r] = deferred.WithLabelValues(n, r)
		}
		m.rej = append(m.rej, rj)
		m.def = append(m.def, df)
	}
	level.Set(float64(s.maxLevel))
	return m, nil
}

func (m *metrics) admit(bi int)                   { m.admitted[bi].Inc() }
func (m *metrics) rejected(bi int, reason string) { m.rej[bi][reason].Inc() }
func (m *metrics) deferredShed(bi int, reason string) {
	m.def[bi][reason].Inc()
}
func (m *metrics) queued(bi int, d time.Duration) { m.queue[bi].Observe(d.Seconds()) }
func (m *metrics) window(level int, overloaded bool) {
	m.level.Set(float64(level))
	if overloaded {
		m.overloaded.Set(1)
	} else {
		m.overloaded.Set(0)
	}
}
