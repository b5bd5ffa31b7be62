package shedding

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlotsConcurrent takes and returns slots from many goroutines at once,
// through the lock-free paths and the waiting one: never more than n are
// held, every slot comes back, and a waiter that gives up leaves no trace.
func TestSlotsConcurrent(t *testing.T) {
	const n, workers, rounds = 3, 16, 2000
	s := newSlots(n)
	var held, peak, waited atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				ok := s.tryAcquire()
				if !ok {
					// Some give up at once (a past deadline), the rest wait.
					wait := time.Second
					if i%4 == 0 {
						wait = 0
					}
					if err := s.acquire(context.Background(), (g+i)%5, wait); err != nil {
						if err != errWaitTimeout {
							t.Errorf("acquire: %v", err)
						}
						continue
					}
					waited.Add(1)
				}
				h := held.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				runtime.Gosched() // hold it a moment, so others queue
				held.Add(-1)
				s.release()
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > n {
		t.Errorf("%d slots held at once, want at most %d", p, n)
	}
	if waited.Load() == 0 {
		t.Error("no acquire waited: the waiting path was not exercised")
	}
	if w := s.waiting(); w != 0 {
		t.Errorf("waiting %d after the run, want 0", w)
	}
	for i := range n {
		if !s.tryAcquire() {
			t.Fatalf("slot %d not free after the run", i)
		}
	}
	if s.tryAcquire() {
		t.Errorf("more than %d slots free after the run", n)
	}
}

// TestSlotsPriority hands returned slots to waiters smallest key first.
func TestSlotsPriority(t *testing.T) {
	s := newSlots(1)
	if !s.tryAcquire() {
		t.Fatal("first slot not free")
	}
	got := make(chan int, 3)
	for i, key := range []int{7, 2, 5} {
		go func() {
			if err := s.acquire(context.Background(), key, time.Minute); err != nil {
				t.Errorf("acquire %d: %v", key, err)
				return
			}
			got <- key
		}()
		for s.waiting() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	if s.tryAcquire() {
		t.Fatal("tryAcquire took a slot while others wait")
	}
	for _, want := range []int{2, 5, 7} {
		s.release()
		if k := <-got; k != want {
			t.Fatalf("slot went to key %d, want %d", k, want)
		}
	}
	s.release()
	if !s.tryAcquire() {
		t.Fatal("slot not free after the last release")
	}
}
