package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Concurrent heartbeats go out in shared batches, each call gets its own
// answer, and at most one batch is in flight.
func TestHeartbeatGroupCommit(t *testing.T) {
	var b hbBatcher
	var mu sync.Mutex
	inFlight, maxInFlight, batches, biggest, first := 0, 0, 0, 0, 0
	release := make(chan struct{})
	write := func(batch []*hbCall) error {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		batches++
		biggest = max(biggest, len(batch))
		isFirst := batches == 1
		if isFirst {
			first = len(batch)
		}
		mu.Unlock()
		if isFirst {
			<-release // the rest queue up behind the first batch
		}
		for _, c := range batch {
			c.res = "ok:" + c.id
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	started := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			id := fmt.Sprint("n", i)
			res, err := b.do(context.Background(), &hbCall{id: id}, write)
			if err != nil || res != "ok:"+id {
				errs <- fmt.Errorf("call %s: %q %v", id, res, err)
			}
		}()
	}
	for range n {
		<-started
	}
	// Every call is queued or in the first batch (in flight).
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		mu.Lock()
		f := first
		mu.Unlock()
		if (f > 0 && q+f == n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if maxInFlight != 1 {
		t.Errorf("%d batches in flight at once, want 1", maxInFlight)
	}
	if batches > 3 || (first < n && biggest < n-first) {
		t.Errorf("%d calls in %d batches (largest %d): want the queued ones together", n, batches, biggest)
	}
}

// A failed batch fails each of its calls; a call whose context ends while
// it waits in the queue leaves it, and the next batch goes on without it.
func TestHeartbeatGroupCommitErrorsAndLeave(t *testing.T) {
	var b hbBatcher
	release := make(chan struct{})
	boom := errors.New("redis away")
	var mu sync.Mutex
	var written []string
	write := func(batch []*hbCall) error {
		mu.Lock()
		first := len(written) == 0
		for _, c := range batch {
			written = append(written, c.id)
		}
		mu.Unlock()
		if first {
			<-release
			return boom
		}
		for _, c := range batch {
			c.res = "ok"
		}
		return nil
	}
	firstErr := make(chan error, 1)
	go func() {
		_, err := b.do(context.Background(), &hbCall{id: "first"}, write)
		firstErr <- err
	}()
	for { // the first batch is in flight
		mu.Lock()
		n := len(written)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leftErr := make(chan error, 1)
	go func() {
		_, err := b.do(ctx, &hbCall{id: "leaves"}, write)
		leftErr <- err
	}()
	waitQueued(&b, 1)
	cancel()
	if err := <-leftErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued call after its context ended: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-firstErr; !errors.Is(err, boom) {
		t.Fatalf("call of a failed batch: %v, want %v", err, boom)
	}
	if res, err := b.do(context.Background(), &hbCall{id: "later"}, write); err != nil || res != "ok" {
		t.Fatalf("call after: %q %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(written) != "[first later]" {
		t.Fatalf("written %v, want [first later]", written)
	}
}

// The queue is bounded: with a batch stalled in Redis and the queue full,
// a heartbeat comes back at once with errHBBusy instead of waiting (an
// unbounded queue grew the master to 8 GiB at N=5000); once the batch is
// written the queue drains and heartbeats queue again.
func TestHeartbeatQueueBound(t *testing.T) {
	b := hbBatcher{limit: 8}
	release := make(chan struct{})
	var once sync.Once
	write := func(batch []*hbCall) error {
		once.Do(func() { <-release })
		for _, c := range batch {
			c.res = "ok"
		}
		return nil
	}
	first := make(chan error, 1)
	go func() { _, err := b.do(context.Background(), &hbCall{id: "first"}, write); first <- err }()
	for { // the first batch is in flight, the queue empty
		b.mu.Lock()
		inFlight := b.running && len(b.queue) == 0
		b.mu.Unlock()
		if inFlight {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	queued := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.do(context.Background(), &hbCall{id: fmt.Sprint("q", i)}, write)
			queued <- err
		}()
	}
	waitQueued(&b, 8)
	if _, err := b.do(context.Background(), &hbCall{id: "over"}, write); !errors.Is(err, errHBBusy) {
		t.Fatalf("heartbeat over the bound: %v, want errHBBusy", err)
	}
	close(release)
	wg.Wait()
	close(queued)
	for err := range queued {
		if err != nil {
			t.Errorf("queued heartbeat: %v", err)
		}
	}
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if res, err := b.do(context.Background(), &hbCall{id: "after"}, write); err != nil || res != "ok" {
		t.Fatalf("heartbeat after the queue drained: %q %v", res, err)
	}
}

// waitQueued waits until n calls wait in b's queue.
func waitQueued(b *hbBatcher, n int) {
	for {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
