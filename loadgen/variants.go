package loadgen

import (
	"context"
	"sort"
	"time"

	"willow/client"
)

// Variant readiness: an upload whose commit answered processing (no
// variants listed) is polled, as a client polls its media's status, until
// its first variant downloads; the time from the acknowledgement to then
// is its variant-ready latency. One whose commit listed its variants was
// ready at the acknowledgement (0). The polls back off by pollGrowth from
// pollFirst to pollMax (pollMaxPool1 for an item held in buffer pool 1,
// whose variants wait for its drain), so a latency is at most 25% or one
// poll interval over the true one, and a long backlog does not multiply
// the downloads.
const (
	pollFirst    = 100 * time.Millisecond
	pollGrowth   = 1.25
	pollMax      = 2 * time.Second
	pollMaxPool1 = 5 * time.Second
)

// VariantStats is the variant-ready latency of a run's acknowledged
// uploads: from the acknowledgement to the first variant downloadable.
type VariantStats struct {
	// Acked counts the acknowledged uploads; Processing those whose
	// commit answered processing (no variants yet) and were polled.
	Acked      int `json:"acked"`
	Processing int `json:"processing"`
	// NotReady counts the polled uploads with no variant downloadable
	// VerifyTimeout after the run's verification began; P50Ms and P99Ms
	// are over the others (0 for those acknowledged with their variants).
	NotReady int     `json:"not_ready"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// awaitVariants polls a until one of its variants downloads, or r.pollCtx
// ends (VerifyTimeout after the run's verification began): that upload
// counts as not ready.
func (r *runner) awaitVariants(a acked, acked time.Time, pool1 bool) {
	variant := "thumb"
	if a.video {
		variant = "poster"
	}
	limit := pollMax
	if pool1 {
		limit = pollMaxPool1
	}
	wait := pollFirst
	for {
		sleep(r.pollCtx, wait)
		if r.pollCtx.Err() != nil {
			r.mu.Lock()
			r.notReady++
			r.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(client.WithRequest(r.pollCtx, a.business, a.user), downloadTimout)
		var cw countWriter
		_, err := r.cfg.Target.Client.Download(ctx, a.id, variant, &cw)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.ready = append(r.ready, time.Since(acked))
			r.mu.Unlock()
			return
		}
		wait = min(time.Duration(float64(wait)*pollGrowth), limit)
	}
}

// variantStats sums the variant-ready latencies; the caller holds r.mu.
func (r *runner) variantStats() VariantStats {
	lat := append([]time.Duration(nil), r.ready...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	s := VariantStats{Acked: len(r.acks), Processing: r.polled, NotReady: r.notReady,
		P50Ms: percentile(lat, 0.5), P99Ms: percentile(lat, 0.99)}
	if len(lat) > 0 {
		s.MaxMs = float64(lat[len(lat)-1]) / float64(time.Millisecond)
	}
	return s
}
