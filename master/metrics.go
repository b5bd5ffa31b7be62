package master

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
)

type metrics struct {
	nodes       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	routes      *prometheus.CounterVec
	isLeader    prometheus.Gauge
	// hbNotWritten counts heartbeats answered without reaching Redis.
	hbNotWritten *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "willow_master_nodes",
			Help: "Registered nodes by role, region and state."}, []string{"role", "region", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_master_node_transitions_total",
			Help: "Node state changes decided by this master, by new state."}, []string{"state"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_master_route_requests_total",
			Help: "Route requests by role and gRPC code."}, []string{"role", "code"}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_master_leader",
			Help: "1 while this master holds the probe and ejection lease."}),
		hbNotWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_master_heartbeats_not_written_total",
			Help: "Heartbeats this master counted but could not write to Redis, by reason (redis: an error or timeout; queue_full: Redis not keeping up)."}, []string{"reason"}),
	}
	for _, r := range []string{"redis", "queue_full"} {
		m.hbNotWritten.WithLabelValues(r)
	}
	reg.MustRegister(m.nodes, m.transitions, m.routes, m.isLeader, m.hbNotWritten)
	return m
}

// observe sets the node gauges from a snapshot: counted first, one
// gauge update per role, region and state (the snapshot is observed four
// times a second, and holds every node).
func (m *metrics) observe(v *view, now time.Time, missedAfter time.Duration) {
	type key struct{ role, region, state string }
	counts := map[key]int{}
	for _, e := range v.entries {
		st, _, _ := e.state(now, missedAfter)
		counts[key{e.info.GetRole(), e.info.GetRegion(), st}]++
	}
	m.nodes.Reset()
	for k, n := range counts {
		m.nodes.WithLabelValues(k.role, k.region, k.state).Set(float64(n))
	}
}

func (m *metrics) transition(h health) { m.transitions.WithLabelValues(h.State).Inc() }

func (m *metrics) route(role string, err error) {
	m.routes.WithLabelValues(role, status.Code(err).String()).Inc()
}

func (m *metrics) leader(b bool) {
	if b {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
	}
}
