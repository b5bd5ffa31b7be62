package timeline

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	heldItems   prometheus.Gauge
	heldUsers   prometheus.Gauge
	oldestAge   prometheus.Gauge
	releaseRate prometheus.Gauge
	released    prometheus.Counter
	published   prometheus.Counter
	delivered   prometheus.Counter
	held        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		heldItems: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_timeline_held_items",
			Help: "Notifications held back, cluster-wide (read from Redis)."}),
		heldUsers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_timeline_held_users",
			Help: "Users with held notifications, cluster-wide."}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_timeline_oldest_held_age_seconds",
			Help: "Age of the oldest held notification; 0 when none is held."}),
		releaseRate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_timeline_release_per_second",
			Help: "Held notifications released per second, cluster-wide, over the last refresh interval."}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_timeline_released_total",
			Help: "Held notifications released by this service."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_timeline_published_total",
			Help: "Posts published (first publish of each post)."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_timeline_delivered_total",
			Help: "Notifications delivered at publish, the author's own included."}),
		held: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_timeline_held_total",
			Help: "Notifications held at publish."}),
	}
	for _, c := range []prometheus.Collector{m.heldItems, m.heldUsers, m.oldestAge, m.releaseRate,
		m.released, m.published, m.delivered, m.held} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("timeline: metrics: %w", err)
		}
	}
	return m, nil
}
