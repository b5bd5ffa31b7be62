package shedding

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// errWaitTimeout is returned by slots.acquire after maxWait.
var errWaitTimeout = errors.New("shedding: waited too long for a slot")

// slots is a counting semaphore whose waiters are served by priority
// (smallest key first, FIFO among equals), so under overload the important
// requests wait least and the unimportant ones run into MaxWait.
type slots struct {
	mu      sync.Mutex // guards free, waiters, seq
	free    int
	waiters waitHeap
	seq     uint64
}

type waiter struct {
	key     int
	seq     uint64
	idx     int
	ready   chan struct{}
	granted bool
}

func newSlots(n int) *slots { return &slots{free: n} }

// tryAcquire takes a slot if one is free and nobody waits.
func (s *slots) tryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		return true
	}
	return false
}

// acquire waits up to maxWait for a slot. It returns errWaitTimeout or the
// context's error when it got none.
func (s *slots) acquire(ctx context.Context, key int, maxWait time.Duration) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	s.seq++
	w := &waiter{key: key, seq: s.seq, ready: make(chan struct{})}
	heap.Push(&s.waiters, w)
	s.mu.Unlock()

	t := time.NewTimer(maxWait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-t.C:
		err = errWaitTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		return nil // granted just as we gave up: keep it
	}
	heap.Remove(&s.waiters, w.idx)
	return err
}

// waiting returns the number of waiters.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// release returns a slot, granting it to the most important waiter.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	if len(s.waiters) == 0 {
		s.free++
		return
	}
	w := heap.Pop(&s.waiters).(*waiter)
	w.granted = true
	close(w.ready)
}

type waitHeap []*waiter

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return h[i].seq < h[j].seq
}
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.idx = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}
