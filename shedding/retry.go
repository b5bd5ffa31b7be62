package shedding

import (
	"sync/atomic"
	"time"
)

// Retry budget defaults.
const (
	DefaultRetryRatio  = 0.1
	DefaultRetryWindow = 10 * time.Second
	retryBuckets       = 10
)

// RetryBudget caps retries at a ratio of requests over a sliding window,
// so retries cannot multiply load during an outage. Its methods are safe
// for concurrent use and take no lock: counts live in time buckets updated
// with atomics. Concurrent AllowRetry calls may overshoot the ratio by at
// most the number of callers racing.
type RetryBudget struct {
	ratio   float64
	floor   atomic.Int64 // retries always allowed per window
	bucket  int64        // ns per bucket
	now     func() time.Time
	buckets [retryBuckets]retryBucket
}

type retryBucket struct {
	epoch   atomic.Int64 // bucket number this slot holds
	reqs    atomic.Int64
	retries atomic.Int64
}

// NewRetryBudget returns a budget allowing retries up to ratio of the
// requests seen over window (defaults DefaultRetryRatio and
// DefaultRetryWindow for non-positive values; now defaults to time.Now).
func NewRetryBudget(ratio float64, window time.Duration, now func() time.Time) *RetryBudget {
	if ratio <= 0 {
		ratio = DefaultRetryRatio
	}
	if window <= 0 {
		window = DefaultRetryWindow
	}
	if now == nil {
		now = time.Now
	}
	b := &RetryBudget{ratio: ratio, bucket: max(int64(window)/retryBuckets, 1), now: now}
	for i := range b.buckets {
		b.buckets[i].epoch.Store(-1)
	}
	return b
}

// SetFloor lets n retries per window through even with little traffic, so
// a quiet caller can still fail over (Finagle's minimum retries).
func (b *RetryBudget) SetFloor(n int) { b.floor.Store(int64(n)) }

// current returns the bucket for now, recycling it if it held an old epoch.
func (b *RetryBudget) current() (*retryBucket, int64) {
	e := b.now().UnixNano() / b.bucket
	bk := &b.buckets[e%retryBuckets]
	if old := bk.epoch.Load(); old != e && bk.epoch.CompareAndSwap(old, e) {
		bk.reqs.Store(0)
		bk.retries.Store(0)
	}
	return bk, e
}

// OnRequest records one first attempt (not a retry).
func (b *RetryBudget) OnRequest() {
	bk, _ := b.current()
	bk.reqs.Add(1)
}

// AllowRetry reports whether one more retry fits the budget, and if so
// spends it.
func (b *RetryBudget) AllowRetry() bool {
	cur, e := b.current()
	var reqs, retries int64
	for i := range b.buckets {
		bk := &b.buckets[i]
		if ep := bk.epoch.Load(); ep > e-retryBuckets && ep <= e {
			reqs += bk.reqs.Load()
			retries += bk.retries.Load()
		}
	}
	if float64(retries+1) > b.ratio*float64(reqs)+float64(b.floor.Load()) {
		return false
	}
	cur.retries.Add(1)
	return true
}
