package shedding_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"willow/shedding"
)

// TestSaturatedHandlerShedsLowPrioritiesFirst offers a loopback gRPC server
// (2 slots, 10 ms service time: 200 requests/s) 350 requests/s for 4 s —
// moments 50, comment 80, avatar 100, prefetch 120 — then 4 x 10
// requests/s. Admission must shed from the bottom: the top business keeps
// >= 99% success, success falls with priority, and the level comes back to
// admitting everything once the load drops.
func TestSaturatedHandlerShedsLowPrioritiesFirst(t *testing.T) {
	s, err := shedding.New(shedding.Config{
		MaxInFlight: 2,
		Window:      100 * time.Millisecond,
		MaxWait:     200 * time.Millisecond,
	}, shedding.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{service: 10 * time.Millisecond}
	cc := serve(t, s, ts)
	businesses := []string{"moments", "comment", "avatar", "prefetch"}

	type tally struct{ ok, total atomic.Int64 }
	drive := func(perSecond []int, d time.Duration, tallies []*tally) {
		var wg sync.WaitGroup
		for i, b := range businesses {
			wg.Go(func() {
				tick := time.NewTicker(time.Second / time.Duration(perSecond[i]))
				defer tick.Stop()
				stop := time.After(d)
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					user := fmt.Sprintf("%s-user-%d", b, rand.IntN(1000))
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						defer cancel()
						_, err := call(ctx, cc, mWork, b, user)
						if tallies != nil {
							tallies[i].total.Add(1)
							if err == nil {
								tallies[i].ok.Add(1)
							}
						}
					})
				}
			})
		}
		wg.Wait()
	}

	tallies := make([]*tally, len(businesses))
	for i := range tallies {
		tallies[i] = &tally{}
	}
	drive([]int{50, 80, 100, 120}, 4*time.Second, tallies)
	success := make([]float64, len(businesses))
	for i, b := range businesses {
		success[i] = float64(tallies[i].ok.Load()) / float64(tallies[i].total.Load())
		t.Logf("%-8s %4d/%4d ok (%.1f%%)", b, tallies[i].ok.Load(), tallies[i].total.Load(), 100*success[i])
	}
	t.Logf("level after overload: %d of %d, queue %.1f ms", s.Level(), s.MaxLevel(), s.QueueMs())
	if success[0] < 0.99 {
		t.Errorf("top priority success %.3f, want >= 0.99", success[0])
	}
	if success[3] > 0.5 {
		t.Errorf("lowest priority success %.3f, want it shed (< 0.5)", success[3])
	}
	for i := 1; i < len(success); i++ {
		if success[i] > success[i-1]+0.05 {
			t.Errorf("%s success %.3f above higher-priority %s %.3f", businesses[i], success[i], businesses[i-1], success[i-1])
		}
	}
	if s.Level() >= s.MaxLevel() {
		t.Errorf("level %d: admission never cut under overload", s.Level())
	}

	// Load drops: the level must come back.
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for s.Level() < s.MaxLevel() && time.Now().Before(deadline) {
		drive([]int{10, 10, 10, 10}, 250*time.Millisecond, nil)
	}
	if got := s.Level(); got < s.MaxLevel() {
		t.Errorf("level %d 5 s after the load dropped, want %d", got, s.MaxLevel())
	} else {
		t.Logf("level back to %d within %v of the load dropping", got, time.Since(start).Round(250*time.Millisecond))
	}
}
