package node

import (
	"math"
	"sync/atomic"
	"time"
)

// latencyHist counts request durations in logarithmic buckets between two
// heartbeats, for Load.latency_p99_ms. Buckets grow by latencyFactor from
// 1 ms, so the p99 is known to within that factor; recording is two
// atomic adds and no lock.
type latencyHist struct {
	counts [latencyBuckets]atomic.Int64
}

const (
	latencyBuckets = 100
	latencyFactor  = 1.2 // 1.2^98 ms ≈ 17 days: the last bucket is open
)

var logLatencyFactor = math.Log(latencyFactor)

// bucketOf returns the bucket of a duration of ms milliseconds: bucket 0
// holds up to 1 ms, bucket i up to latencyFactor^i ms.
func bucketOf(ms float64) int {
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(math.Log(ms)/logLatencyFactor)), latencyBuckets-1)
}

func (h *latencyHist) observe(d time.Duration) {
	h.counts[bucketOf(float64(d)/float64(time.Millisecond))].Add(1)
}

// p99 returns the upper bound of the bucket holding the 99th percentile
// of the durations since the previous call, and resets the counts; 0
// without any.
func (h *latencyHist) p99() float64 {
	var c [latencyBuckets]int64
	var total int64
	for i := range h.counts {
		c[i] = h.counts[i].Swap(0)
		total += c[i]
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(0.99 * float64(total)))
	var cum int64
	for i, k := range c {
		if cum += k; cum >= rank {
			return math.Pow(latencyFactor, float64(i))
		}
	}
	return math.Pow(latencyFactor, latencyBuckets-1)
}

// ObserveLatency counts one request of d in the heartbeat's p99
// (Load.latency_p99_ms), for requests the node serves outside gRPC (the
// upload front's tus/IETF HTTP). It leaves the request and error counts
// the master judges health by as they are. A nil node does nothing.
func (n *Node) ObserveLatency(d time.Duration) {
	if n != nil {
		n.stats.latency.observe(d)
	}
}
