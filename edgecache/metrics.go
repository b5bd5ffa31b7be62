package edgecache

import "github.com/prometheus/client_golang/prometheus"

// Tiers, as metric labels.
const (
	tierMemory = "memory"
	tierDisk   = "disk"
	tierPeer   = "peer"
	tierOrigin = "origin"
)

type metrics struct {
	hits          *prometheus.CounterVec // by tier
	bytesServed   *prometheus.CounterVec // by proto
	originFetches *prometheus.CounterVec // by source, result
	evictions     *prometheus.CounterVec // by tier
	shed          *prometheus.CounterVec // by business
	members       prometheus.Gauge
	fillBytes     prometheus.Gauge
	originBytes   prometheus.Counter
	transcodes    *prometheus.CounterVec // by result

	hitBy     map[string]prometheus.Counter // read-only after newMetrics
	bytesHTTP prometheus.Counter
	bytesGRPC prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_hits_total",
			Help: "Requests served, by the tier the object came from (memory, disk, peer, origin).",
		}, []string{"tier"}),
		bytesServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_bytes_served_total",
			Help: "Body bytes served, by protocol.",
		}, []string{"proto"}),
		originFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_origin_fetches_total",
			Help: "Origin reads, by source (store, pool2) and result (ok, not_found, error).",
		}, []string{"source", "result"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_evictions_total",
			Help: "Objects evicted, by tier (memory, hot, disk).",
		}, []string{"tier"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_shed_total",
			Help: "Downloads rejected by shed_ratio, by business.",
		}, []string{"business"}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "willow_edgecache_ring_members",
			Help: "Nodes in this OC's hash ring, this one included.",
		}),
		fillBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "willow_edgecache_fill_bytes",
			Help: "Bytes of the fill budget held by running fills.",
		}),
		originBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "willow_edgecache_origin_bytes_total",
			Help: "Bytes read from origin (store and pool 2).",
		}),
		transcodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "willow_edgecache_jpeg_fallbacks_total",
			Help: "JPEG fallbacks made from HEIC variants, by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.hits, m.bytesServed, m.originFetches, m.evictions, m.shed, m.members, m.fillBytes, m.originBytes, m.transcodes)
	m.hitBy = map[string]prometheus.Counter{}
	for _, t := range []string{tierMemory, tierDisk, tierPeer, tierOrigin} {
		m.hitBy[t] = m.hits.WithLabelValues(t)
	}
	m.bytesHTTP = m.bytesServed.WithLabelValues("http")
	m.bytesGRPC = m.bytesServed.WithLabelValues("grpc")
	return m
}

// hit counts one request served from tier.
func (m *metrics) hit(tier string) { m.hitBy[tier].Inc() }
