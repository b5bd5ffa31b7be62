package shedding

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errWaitTimeout is returned by slots.acquire after maxWait.
var errWaitTimeout = errors.New("shedding: waited too long for a slot")

// slots is a counting semaphore whose waiters are served by priority
// (smallest key first, FIFO among equals), so under overload the important
// requests wait least and the unimportant ones run into MaxWait. While
// nobody waits, taking and returning a slot is one compare-and-swap each
// (no lock); waiting, giving up and handing a slot to a waiter take mu.
type slots struct {
	// state is free<<32 | waiting: the free slots and the number of
	// waiters. waiting changes only under mu, and while it is not 0 free
	// is 0 (a returned slot goes to a waiter), so the lock-free paths
	// change free only in a state without waiters.
	state   atomic.Uint64
	mu      sync.Mutex // guards waiters (len(waiters) == waiting), seq
	waiters waitHeap
	seq     uint64
}

const oneFree = 1 << 32 // a free slot in slots.state

type waiter struct {
	key     int
	seq     uint64
	idx     int
	ready   chan struct{}
	granted bool
}

func newSlots(n int) *slots {
	s := &slots{}
	s.state.Store(uint64(n) * oneFree)
	return s
}

// tryAcquire takes a slot if one is free and nobody waits.
func (s *slots) tryAcquire() bool {
	for {
		st := s.state.Load()
		if st < oneFree || uint32(st) != 0 {
			return false
		}
		if s.state.CompareAndSwap(st, st-oneFree) {
			return true
		}
	}
}

// acquire waits up to maxWait for a slot. It returns errWaitTimeout or the
// context's error when it got none.
func (s *slots) acquire(ctx context.Context, key int, maxWait time.Duration) error {
	s.mu.Lock()
	for {
		st := s.state.Load()
		if st >= oneFree && uint32(st) == 0 {
			if s.state.CompareAndSwap(st, st-oneFree) {
				s.mu.Unlock()
				return nil
			}
			continue
		}
		// No slot free (or others wait, so none is): one waiter more.
		if s.state.CompareAndSwap(st, st+1) {
			break
		}
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
	s.state.Add(^uint64(0)) // one waiter less
	return err
}

// waiting returns the number of waiters.
func (s *slots) waiting() int { return int(uint32(s.state.Load())) }

// release returns a slot, granting it to the most important waiter.
func (s *slots) release() {
	for {
		st := s.state.Load()
		if uint32(st) != 0 {
			break
		}
		if s.state.CompareAndSwap(st, st+oneFree) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 {
		// The waiters gave up since: free it. Under mu nobody starts
		// waiting meanwhile, but tryAcquire may take free slots.
		s.state.Add(oneFree)
		return
	}
	w := heap.Pop(&s.waiters).(*waiter)
	w.granted = true
	close(w.ready)
	s.state.Add(^uint64(0)) // one waiter less; free stays 0
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
