package upload

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the upload front's Prometheus series.
type metrics struct {
	uploads  *prometheus.CounterVec
	bytes    prometheus.Counter
	spills   *prometheus.CounterVec
	journal  prometheus.Gauge
	drained  *prometheus.CounterVec
	compress *prometheus.CounterVec
	failed   *prometheus.CounterVec
	// compactions and reclaimed count background pool compactions and
	// the disk bytes they gave back.
	compactions *prometheus.CounterVec
	reclaimed   *prometheus.CounterVec
	// mirror counts writes of staged bytes to the region's store by
	// outcome; adopted counts uploads taken over from another front.
	mirror  *prometheus.CounterVec
	adopted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_uploads_total",
			Help: "Upload commits by outcome (store, pool1, pool2, duplicate, rejected)."}, []string{"outcome"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_upload_bytes_total",
			Help: "Raw bytes of committed uploads."}),
		spills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_spills_total",
			Help: "Uploads spilled into a buffer pool, by pool and cause."}, []string{"pool", "cause"}),
		journal: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_upload_journal_depth",
			Help: "Compress jobs waiting in the durable journal."}),
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_drained_total",
			Help: "Media moved from a buffer pool to the store."}, []string{"pool"}),
		compress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_compress_total",
			Help: "Compress attempts by outcome (ok, error; not_started: a commit's first ask found no worker free; abandoned: the commit came first)."}, []string{"outcome"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_failed_total",
			Help: "Media moved to the dead-letter state failed, by reason (compress refused the bytes for good)."}, []string{"reason"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_pool_compactions_total",
			Help: "Background compactions of a buffer pool."}, []string{"pool"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_pool_reclaimed_bytes_total",
			Help: "Disk bytes given back by pool compactions."}, []string{"pool"}),
		mirror: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_staging_mirror_total",
			Help: "Durable ranges of staged uploads copied to the region's store, by outcome (ok, error; abandoned: the commit came first)."}, []string{"outcome"}),
		adopted: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_upload_adopted_total",
			Help: "Uploads begun on another front of the region and continued on this one."}),
	}
	reg.MustRegister(m.uploads, m.bytes, m.spills, m.journal, m.drained, m.compress, m.failed, m.compactions, m.reclaimed, m.mirror, m.adopted)
	m.initSeries()
	return m
}

// initSeries creates the series operators look for at 0 (docs/upload.md),
// so a counter reads 0 before its first event instead of not existing.
func (m *metrics) initSeries() {
	for _, o := range []string{"store", "pool1", "pool2", "duplicate", "rejected", "shed", "retiring", "staging_full", "expired"} {
		m.uploads.WithLabelValues(o)
	}
	for _, pool := range []string{"pool1", "pool2"} {
		m.drained.WithLabelValues(pool)
		m.compactions.WithLabelValues(pool)
		m.reclaimed.WithLabelValues(pool)
	}
	for _, cause := range []string{"force", "shed"} { // placement.go
		m.spills.WithLabelValues("pool1", cause)
	}
	for _, cause := range []string{"force", "budget", "store_error"} {
		m.spills.WithLabelValues("pool2", cause)
	}
	for _, o := range []string{"ok", "error"} {
		m.compress.WithLabelValues(o)
		m.mirror.WithLabelValues(o)
	}
	m.mirror.WithLabelValues("abandoned")
	// The permanent refusals of compress (compress/doc.go) that move
	// media to failed.
	for _, r := range []string{"pixel_bomb", "corrupt_media", "too_large", "too_long", "source_missing", ReasonRetriesExhausted} {
		m.failed.WithLabelValues(r)
	}
}

// New validates cfg, recovers the staging dir and registers the Upload

// counterValue reads a counter's current value (for BufferStatus).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
