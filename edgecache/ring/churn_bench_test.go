package ring_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"willow/edgecache/ring"
	"willow/edgecache/s4lru"
)

// The churn benchmark replays one Zipf trace against N edges, each an
// S4LRU cache (the edge's memory tier) holding 1/N of a fixed total, with
// keys placed by the ring; then it adds one edge (empty) or removes one
// (its cache gone) and keeps replaying. It reports the fraction of keys
// that changed owner against the ideal (1/(N+1) on an add, 1/N on a
// remove), and the hit-ratio dip after the change and how long the hit
// ratio takes to come back.
const (
	churnKeys     = 100_000 // distinct objects
	churnAlpha    = 0.8     // Zipf exponent of object popularity
	churnCacheFr  = 0.10    // total cache across the edges, fraction of the keys
	churnWarm     = 1_000_000
	churnAfter    = 600_000
	churnWindow   = 10_000 // requests per hit-ratio window
	churnRecovery = 0.01   // back within 1 point of the baseline
)

// zipfTrace draws n requests over k keys with P(rank r) ~ 1/r^alpha.
func zipfTrace(n, k int, alpha float64, seed uint64) []int32 {
	cdf := make([]float64, k)
	var sum float64
	for r := range k {
		sum += 1 / math.Pow(float64(r+1), alpha)
		cdf[r] = sum
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	// Popularity rank is not key order: shuffle which key has which rank.
	perm := rng.Perm(k)
	out := make([]int32, n)
	for i := range out {
		u := rng.Float64() * sum
		out[i] = int32(perm[sort.SearchFloat64s(cdf, u)])
	}
	return out
}

type churnResult struct {
	moved, ideal        float64
	base, worst, settle float64 // hit ratios
	recoveryReq         int     // requests after the change until a window is back within churnRecovery (-1: never)
}

func churn(edges int, add bool, trace, ks []string) churnResult {
	members := make([]string, edges)
	for i := range members {
		members[i] = fmt.Sprintf("edgecache-a-%02d", i+1)
	}
	caches := map[string]*s4lru.Cache[struct{}]{}
	total := int64(churnCacheFr * churnKeys)
	newCache := func() *s4lru.Cache[struct{}] {
		return s4lru.New(s4lru.Config[struct{}]{CapacityBytes: max(total/int64(edges), 1)})
	}
	for _, m := range members {
		caches[m] = newCache()
	}
	r := ring.New(0, nil, members...)
	serve := func(key string) bool {
		c := caches[r.Get(key)]
		if _, ok := c.Get(key); ok {
			return true
		}
		c.Add(key, struct{}{}, 1)
		return false
	}
	var hits int
	for i, key := range trace[:churnWarm] {
		if serve(key) && i >= churnWarm-10*churnWindow {
			hits++
		}
	}
	res := churnResult{base: float64(hits) / float64(10*churnWindow), worst: 1, recoveryReq: -1}
	next := r
	if add {
		m := fmt.Sprintf("edgecache-a-%02d", edges+1)
		caches[m] = newCache()
		next = ring.New(0, nil, append(members, m)...)
		res.ideal = 1 / float64(edges+1)
	} else {
		gone := members[len(members)/2]
		delete(caches, gone)
		rest := append(append([]string(nil), members[:len(members)/2]...), members[len(members)/2+1:]...)
		next = ring.New(0, nil, rest...)
		res.ideal = 1 / float64(edges)
	}
	var moved int
	for _, k := range ks {
		if r.Get(k) != next.Get(k) {
			moved++
		}
	}
	res.moved = float64(moved) / float64(len(ks))
	r = next
	hits = 0
	for i, key := range trace[churnWarm : churnWarm+churnAfter] {
		if serve(key) {
			hits++
		}
		if (i+1)%churnWindow == 0 { // one window done
			h := float64(hits) / churnWindow
			res.worst = min(res.worst, h)
			if res.recoveryReq < 0 && h >= res.base-churnRecovery {
				res.recoveryReq = i + 1
			}
			res.settle, hits = h, 0
		}
	}
	return res
}

// BenchmarkRingChurn runs the churn replay for 3, 10 and 50 edges (make
// bench-ring); one iteration is one add and one remove.
func BenchmarkRingChurn(b *testing.B) {
	ks := make([]string, churnKeys)
	for i := range ks {
		ks[i] = fmt.Sprintf("s.a.upload-a-1.%032x/thumb", i)
	}
	idx := zipfTrace(churnWarm+churnAfter, churnKeys, churnAlpha, 42)
	trace := make([]string, len(idx))
	for i, k := range idx {
		trace[i] = ks[k]
	}
	for _, edges := range []int{3, 10, 50} {
		b.Run(fmt.Sprintf("edges=%d", edges), func(b *testing.B) {
			var add, rem churnResult
			for range b.N {
				add = churn(edges, true, trace, ks)
				rem = churn(edges, false, trace, ks)
			}
			for _, x := range []struct {
				name string
				r    churnResult
			}{{"add", add}, {"remove", rem}} {
				b.ReportMetric(x.r.moved, "moved-frac-"+x.name)
				b.ReportMetric(x.r.moved/x.r.ideal, "moved-vs-ideal-"+x.name)
				b.ReportMetric(100*x.r.base, "hit-base-pct-"+x.name)
				b.ReportMetric(100*(x.r.base-x.r.worst), "hit-dip-pts-"+x.name)
				b.ReportMetric(100*x.r.settle, "hit-settle-pct-"+x.name)
				// -1: never back within a point of the baseline (a remove
				// takes 1/N of the cache capacity with it).
				b.ReportMetric(float64(x.r.recoveryReq)/1000, "recovery-kreq-"+x.name)
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
