package shedding

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the Shedder's Prometheus series, resolved per business
// index up front so the hot path does no label lookups.
type metrics struct {
	biz        []bizCount                      // the Shedder's
	rej        []map[string]prometheus.Counter // by reason
	def        []map[string]prometheus.Counter // by reason
	queue      *queueHist
	level      prometheus.Gauge
	overloaded prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, s *Shedder) (*metrics, error) {
	admitted := &admittedCounts{desc: prometheus.NewDesc("willow_shedding_admitted_total",
		"Requests admitted by the shedder, by business.", []string{"business"}, nil), biz: s.biz}
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_shedding_rejected_total",
		Help: "Requests rejected by the shedder, by business and reason.",
	}, []string{"business", "reason"})
	deferred := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_shedding_deferred_total",
		Help: "Requests of Deferred methods that admission would have shed, handed to the handler, by business and reason.",
	}, []string{"business", "reason"})
	queue := &queueHist{desc: prometheus.NewDesc("willow_shedding_queue_seconds",
		"Time requests waited for a concurrency slot, by business.", []string{"business"}, nil), biz: s.biz}
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
	queue.init(names)
	admitted.names = names
	m := &metrics{biz: s.biz, level: level, overloaded: overloaded, queue: queue}
	for _, n := range names {
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

// admit counts a request admitted other than on a free slot (after a wait,
// or by Admit, which takes no slot); gate counts the others itself
// (bizCount.fast).
func (m *metrics) admit(bi int)                   { m.biz[bi].other.Add(1) }
func (m *metrics) rejected(bi int, reason string) { m.rej[bi][reason].Inc() }
func (m *metrics) deferredShed(bi int, reason string) {
	m.def[bi][reason].Inc()
}
func (m *metrics) queued(bi int, d time.Duration) { m.queue.observe(bi, d) }
func (m *metrics) window(level int, overloaded bool) {
	m.level.Set(float64(level))
	if overloaded {
		m.overloaded.Set(1)
	} else {
		m.overloaded.Set(0)
	}
}

// bizCount is one business index's admission counters, on a cache line
// of its own. A request admitted on a free slot (almost every one) is one
// add, to fast, which counts it at once as admitted
// (willow_shedding_admitted_total), as a 0 s wait in
// willow_shedding_queue_seconds and in the window's queueing mean (the
// roll adds what fast grew by), instead of an add in each.
type bizCount struct {
	fast  atomic.Uint64 // admitted on a free slot
	other atomic.Uint64 // admitted otherwise: after a wait, or by Admit
	_     [48]byte
}

// admittedCounts is willow_shedding_admitted_total by business index:
// fast + other of each bizCount.
type admittedCounts struct {
	desc  *prometheus.Desc
	names []string
	biz   []bizCount
}

func (a *admittedCounts) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *admittedCounts) Collect(ch chan<- prometheus.Metric) {
	for bi, name := range a.names {
		n := a.biz[bi].fast.Load() + a.biz[bi].other.Load()
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.CounterValue, float64(n), name)
	}
}

// queueBuckets are the upper bounds of willow_shedding_queue_seconds.
var queueBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}

// queueHist is the histogram willow_shedding_queue_seconds by business
// index. Most requests find a free slot and wait 0 s: such a wait is
// counted by bizCount.fast (one atomic add, which also counts the
// admission), which a scrape adds to the count and to every bucket (0 is
// under each bound), instead of a full histogram observation on every
// call. A real wait (the request queued, so it is slow anyway) takes mu.
// A scrape shows exactly the histogram a plain Observe of every wait
// would.
type queueHist struct {
	desc  *prometheus.Desc
	names []string
	biz   []bizCount      // the Shedder's: fast counts 0 s waits
	zero  []atomic.Uint64 // waits measured as 0 s after all, by business index
	mu    sync.Mutex
	waits []histCounts // non-zero waits, by business index; guarded by mu
}

type histCounts struct {
	buckets []uint64 // non-cumulative, by queueBuckets index; the last is +Inf
	count   uint64
	sum     float64
}

func (q *queueHist) init(names []string) {
	q.names = names
	q.zero = make([]atomic.Uint64, len(names))
	q.waits = make([]histCounts, len(names))
	for i := range q.waits {
		q.waits[i].buckets = make([]uint64, len(queueBuckets)+1)
	}
}

func (q *queueHist) observe(bi int, d time.Duration) {
	if d <= 0 {
		q.zero[bi].Add(1)
		return
	}
	v := d.Seconds()
	i := sort.SearchFloat64s(queueBuckets, v) // first bound >= v
	q.mu.Lock()
	h := &q.waits[bi]
	h.buckets[i]++
	h.count++
	h.sum += v
	q.mu.Unlock()
}

func (q *queueHist) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

func (q *queueHist) Collect(ch chan<- prometheus.Metric) {
	for bi, name := range q.names {
		zero := q.biz[bi].fast.Load() + q.zero[bi].Load()
		cum := make(map[float64]uint64, len(queueBuckets))
		q.mu.Lock()
		h := q.waits[bi]
		n := zero
		for i, ub := range queueBuckets {
			n += h.buckets[i]
			cum[ub] = n
		}
		count, sum := zero+h.count, h.sum
		q.mu.Unlock()
		ch <- prometheus.MustNewConstHistogram(q.desc, count, sum, cum, name)
	}
}
