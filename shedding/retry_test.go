package shedding_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"willow/shedding"
)

func TestRetryBudget(t *testing.T) {
	tests := []struct {
		name     string
		ratio    float64
		requests int
		step     time.Duration // clock advance per request
	}{
		{"10% within one window", 0.1, 5000, time.Millisecond},
		{"10% over a sliding window", 0.1, 10000, 5 * time.Millisecond},
		{"25%", 0.25, 4000, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := shedding.NewRetryBudget(tt.ratio, 10*time.Second, clk.Now)
			allowed := 0
			for range tt.requests {
				clk.Advance(tt.step)
				b.OnRequest()
				// Every request fails and wants a retry (an outage).
				if b.AllowRetry() {
					allowed++
				}
			}
			got := float64(allowed) / float64(tt.requests)
			if got > tt.ratio+0.005 || got < tt.ratio-0.02 {
				t.Errorf("allowed %d retries for %d requests (%.3f), want about %.2f and never above", allowed, tt.requests, got, tt.ratio)
			}
		})
	}

	t.Run("window slides", func(t *testing.T) {
		clk := newClock()
		b := shedding.NewRetryBudget(0.1, time.Second, clk.Now)
		for range 100 {
			b.OnRequest()
		}
		if !b.AllowRetry() {
			t.Fatal("retry refused with budget left")
		}
		clk.Advance(2 * time.Second)
		if b.AllowRetry() {
			t.Fatal("retry allowed on requests older than the window")
		}
	})

	t.Run("concurrent callers", func(t *testing.T) {
		b := shedding.NewRetryBudget(0.1, time.Minute, nil)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		const workers, each = 8, 2000
		for range workers {
			wg.Go(func() {
				for range each {
					b.OnRequest()
					if b.AllowRetry() {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if max := int64(0.1*workers*each) + workers; allowed.Load() > max {
			t.Errorf("allowed %d retries, want <= %d", allowed.Load(), max)
		}
	})
}

func TestRetryBudgetFloor(t *testing.T) {
	clk := newClock()
	b := shedding.NewRetryBudget(0.1, time.Second, clk.Now)
	if b.AllowRetry() {
		t.Fatal("retry allowed with no requests and no floor")
	}
	b.SetFloor(3)
	allowed := 0
	for range 10 {
		if b.AllowRetry() {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("floor 3 allowed %d retries of a quiet caller, want 3", allowed)
	}
	clk.Advance(2 * time.Second)
	if !b.AllowRetry() {
		t.Error("floor not renewed in the next window")
	}
}
