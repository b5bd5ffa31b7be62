package edgecache

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"willow/flex"
)

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
	httpRequests  *prometheus.CounterVec // by code, method
	httpSeconds   *prometheus.HistogramVec

	hitBy     map[string]prometheus.Counter // read-only after newMetrics
	http      *httpCounts
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
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_edgecache_http_requests_total",
		Help: "HTTP requests answered, by status code and method.",
	}, []string{"code", "method"})
	m.httpSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "willow_edgecache_http_request_duration_seconds",
		Help:    "Time to answer an HTTP request, headers to last body byte.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12), // 0.5 ms .. 12 s
	}, nil)
	reg.MustRegister(m.hits, m.bytesServed, m.originFetches, m.evictions, m.shed, m.members, m.fillBytes, m.originBytes,
		m.transcodes, m.httpRequests, m.httpSeconds)
	// Every series the docs name exists from the start, at 0.
	for _, t := range []string{tierMemory, "hot", tierDisk} {
		m.evictions.WithLabelValues(t)
	}
	for _, src := range []string{"store", "pool2"} {
		for _, r := range []string{"ok", "not_found", "error"} {
			m.originFetches.WithLabelValues(src, r)
		}
	}
	for _, b := range flex.BusinessNames() {
		m.shed.WithLabelValues(b)
	}
	for _, r := range []string{"ok", "error"} {
		m.transcodes.WithLabelValues(r)
	}
	m.httpSeconds.WithLabelValues()
	for _, code := range []string{"200", "304", "404", "429"} {
		m.httpRequests.WithLabelValues(code, "get")
	}
	m.hitBy = map[string]prometheus.Counter{}
	for _, t := range []string{tierMemory, tierDisk, tierPeer, tierOrigin} {
		m.hitBy[t] = m.hits.WithLabelValues(t)
	}
	m.http = m.newHTTPCounts()
	m.bytesHTTP = m.bytesServed.WithLabelValues("http")
	m.bytesGRPC = m.bytesServed.WithLabelValues("grpc")
	return m
}

// hit counts one request served from tier.
func (m *metrics) hit(tier string) { m.hitBy[tier].Inc() }

// httpCounts counts and times HTTP answers, by code and method (get,
// head, or other: the label never takes a client's string), for both HTTP
// paths. It does what promhttp's InstrumentHandlerCounter and Duration
// do, without their per-request label map and delegator allocations,
// which were most of a cached hit's cost.
type httpCounts struct {
	m       *metrics
	seconds prometheus.Observer
	// The answers of hits (GET 200 and 304, HEAD 200) are resolved once;
	// every other code and method through byCode, on first use.
	get200, get304, head200 prometheus.Counter
	byCode                  sync.Map // httpKey -> prometheus.Counter
}

func (m *metrics) newHTTPCounts() *httpCounts {
	return &httpCounts{
		m:       m,
		seconds: m.httpSeconds.WithLabelValues(),
		get200:  m.httpRequests.WithLabelValues("200", "get"),
		get304:  m.httpRequests.WithLabelValues("304", "get"),
		head200: m.httpRequests.WithLabelValues("200", "head"),
	}
}

// done counts one answer of code to a request of method (an HTTP method)
// whose head was read at start.
func (c *httpCounts) done(code int, method string, start time.Time) {
	c.took(code, method, time.Since(start))
}

// took counts a request answered in d.
func (c *httpCounts) took(code int, method string, d time.Duration) {
	c.counter(code, method).Inc()
	c.seconds.Observe(d.Seconds())
}

func (c *httpCounts) counter(code int, method string) prometheus.Counter {
	switch method {
	case http.MethodGet:
		switch code {
		case http.StatusOK:
			return c.get200
		case http.StatusNotModified:
			return c.get304
		}
		method = "get"
	case http.MethodHead:
		if code == http.StatusOK {
			return c.head200
		}
		method = "head"
	default:
		method = "other"
	}
	k := httpKey{code, method}
	ctr, ok := c.byCode.Load(k)
	if !ok {
		ctr, _ = c.byCode.LoadOrStore(k, c.m.httpRequests.WithLabelValues(strconv.Itoa(code), method))
	}
	return ctr.(prometheus.Counter)
}

// instrument counts and times every HTTP request h answers (httpCounts).
func (m *metrics) instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statusWriters.Get().(*statusWriter)
		sw.ResponseWriter, sw.code = w, 0
		defer func() {
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			sw.ResponseWriter = nil
			statusWriters.Put(sw)
			m.http.done(code, r.Method, start)
		}()
		h.ServeHTTP(sw, r)
	})
}

type httpKey struct {
	code   int
	method string
}

// statusWriter records the status code a handler answers with. It is
// pooled: instrument runs on every request.
type statusWriter struct {
	http.ResponseWriter
	code int
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps the connection's ReadFrom (net/http's response turns a
// copy from a file into sendfile(2)) behind the wrapper.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w.ResponseWriter, r)
}

// Flush passes http.Flusher through.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
