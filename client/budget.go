package client

import (
	"sync"
	"time"
)

// Budget is a retry budget: retries may be at most ratio of the requests
// seen over a sliding window, plus a small floor (minRetries per window) so
// a caller with little traffic can still fail over, as Finagle's retry
// budget does. Retries cannot multiply a peak. It keeps per-second buckets;
// it is safe for concurrent use.
type Budget struct {
	ratio  float64
	floor  int64
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex // guards the buckets
	buckets []budgetBucket
}

type budgetBucket struct {
	sec      int64
	requests int64
	retries  int64
}

// NewBudget returns a budget allowing ratio retries per request, plus
// minRetries, over window (rounded up to whole seconds).
func NewBudget(ratio float64, window time.Duration, minRetries int, now func() time.Time) *Budget {
	n := int((window + time.Second - 1) / time.Second)
	if n < 1 {
		n = 1
	}
	if now == nil {
		now = time.Now
	}
	return &Budget{ratio: ratio, floor: int64(minRetries), window: window, now: now, buckets: make([]budgetBucket, n)}
}

func (b *Budget) bucket() *budgetBucket {
	sec := b.now().Unix()
	bk := &b.buckets[int(sec%int64(len(b.buckets)))]
	if bk.sec != sec {
		*bk = budgetBucket{sec: sec}
	}
	return bk
}

func (b *Budget) totals() (req, ret int64) {
	min := b.now().Unix() - int64(len(b.buckets)) + 1
	for _, bk := range b.buckets {
		if bk.sec >= min {
			req += bk.requests
			ret += bk.retries
		}
	}
	return req, ret
}

// OnRequest counts one first attempt.
func (b *Budget) OnRequest() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucket().requests++
}

// AllowRetry reports whether one more retry fits in the budget and, if so,
// counts it.
func (b *Budget) AllowRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.bucket()
	req, ret := b.totals()
	if float64(ret+1) > b.ratio*float64(req)+float64(b.floor) {
		return false
	}
	bk.retries++
	return true
}
