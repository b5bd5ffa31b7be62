package s4lru_test

import (
	"container/list"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"willow/edgecache/s4lru"
)

// zipf samples ranks 0..n-1 with P(k) proportional to 1/(k+1)^alpha, for
// any alpha > 0 (math/rand's Zipf needs alpha > 1), by inverse CDF over
// precomputed cumulative weights.
type zipf struct {
	cdf []float64
	rng *rand.Rand
}

func newZipf(rng *rand.Rand, alpha float64, n int) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), alpha)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &zipf{cdf: cdf, rng: rng}
}

func (z *zipf) next() int {
	u := z.rng.Float64()
	return sort.SearchFloat64s(z.cdf, u)
}

func TestZipfSampler(t *testing.T) {
	z := newZipf(rand.New(rand.NewPCG(1, 1)), 0.8, 1000)
	count := make([]int, 1000)
	const n = 200_000
	for range n {
		count[z.next()]++
	}
	// P(rank 0) / P(rank 9) = 10^0.8 = 6.31.
	if r := float64(count[0]) / float64(count[9]); r < 5.5 || r > 7.2 {
		t.Fatalf("rank 0 / rank 9 = %.2f, want about 6.31", r)
	}
}

// objectSizes draws sizes from a log-normal around 100 KB (sigma 1.2),
// clamped to [2 KB, 8 MB]: thumbnails and medium photos with a long tail of
// large photos and short videos.
func objectSizes(rng *rand.Rand, n int) []int64 {
	sizes := make([]int64, n)
	for i := range sizes {
		s := math.Exp(math.Log(100_000) + 1.2*rng.NormFloat64())
		sizes[i] = int64(min(max(s, 2_000), 8_000_000))
	}
	return sizes
}

// policy is a byte-bounded cache under test.
type policy interface {
	get(key string) bool
	add(key string, size int64)
}

type segmented struct{ c *s4lru.Cache[struct{}] }

func (s segmented) get(k string) bool     { _, ok := s.c.Get(k); return ok }
func (s segmented) add(k string, n int64) { s.c.Add(k, struct{}{}, n) }

// fifo evicts in insertion order; hits do not reorder.
type fifo struct {
	capacity, bytes int64
	ll              *list.List
	items           map[string]*list.Element
	sizes           map[string]int64
}

func newFIFO(capacity int64) *fifo {
	return &fifo{capacity: capacity, ll: list.New(), items: map[string]*list.Element{}, sizes: map[string]int64{}}
}

func (f *fifo) get(k string) bool { _, ok := f.items[k]; return ok }

func (f *fifo) add(k string, n int64) {
	if n > f.capacity {
		return
	}
	f.items[k] = f.ll.PushFront(k)
	f.sizes[k] = n
	f.bytes += n
	for f.bytes > f.capacity {
		el := f.ll.Back()
		old := el.Value.(string)
		f.ll.Remove(el)
		f.bytes -= f.sizes[old]
		delete(f.items, old)
		delete(f.sizes, old)
	}
}

// BenchmarkHitRatio replays one Zipf(0.8) trace of 1 M requests over 100 k
// objects through S4LRU, LRU and FIFO caches holding 5% of the bytes, and
// reports object and byte hit ratios (in percent) per policy.
//
//	go test -run '^$' -bench HitRatio -benchtime 1x ./edgecache/s4lru
func BenchmarkHitRatio(b *testing.B) {
	const (
		objects  = 100_000
		requests = 1_000_000
		alpha    = 0.8
	)
	rng := rand.New(rand.NewPCG(42, 8))
	sizes := objectSizes(rng, objects)
	var total int64
	for _, s := range sizes {
		total += s
	}
	capacity := total / 20
	// Popularity rank is independent of size: shuffle which object has
	// which rank.
	perm := rng.Perm(objects)
	z := newZipf(rng, alpha, objects)
	trace := make([]int, requests)
	for i := range trace {
		trace[i] = perm[z.next()]
	}
	keys := make([]string, objects)
	for i := range keys {
		keys[i] = fmt.Sprintf("obj-%d", i)
	}
	b.Logf("%d objects, %.2f GB total, cache %.0f MB (5%%), %d requests, zipf alpha %.1f",
		objects, float64(total)/1e9, float64(capacity)/1e6, requests, alpha)
	policies := []struct {
		name string
		mk   func() policy
	}{
		{"S4LRU", func() policy { return segmented{s4lru.New(s4lru.Config[struct{}]{CapacityBytes: capacity})} }},
		{"LRU", func() policy {
			return segmented{s4lru.New(s4lru.Config[struct{}]{CapacityBytes: capacity, Segments: 1})}
		}},
		{"FIFO", func() policy { return newFIFO(capacity) }},
	}
	for range b.N {
		for _, p := range policies {
			c := p.mk()
			var hits, hitBytes, reqBytes int64
			for _, o := range trace {
				reqBytes += sizes[o]
				if c.get(keys[o]) {
					hits++
					hitBytes += sizes[o]
					continue
				}
				c.add(keys[o], sizes[o])
			}
			oh := 100 * float64(hits) / requests
			bh := 100 * float64(hitBytes) / float64(reqBytes)
			b.ReportMetric(oh, p.name+"-hit%")
			b.ReportMetric(bh, p.name+"-bytehit%")
			b.Logf("%-5s object hit ratio %.2f%%  byte hit ratio %.2f%%", p.name, oh, bh)
		}
	}
}
