package compress

import (
	"testing"
	"time"
)

func TestQueueStatsP99(t *testing.T) {
	now := time.Unix(1000, 0)
	q := &queueStats{now: func() time.Time { return now }, waiters: map[uint64]time.Time{}}
	if q.p99() != 0 {
		t.Fatal("idle p99 not 0")
	}
	for i := 1; i <= 99; i++ {
		q.observe(time.Duration(i) * time.Millisecond)
	}
	q.enter(now.Add(-2 * time.Second)) // a task waiting 2 s now
	if got := q.p99(); got != 99 {
		t.Fatalf("p99 %v ms, want 99 (100 samples)", got)
	}
	q.enter(now.Add(-3 * time.Second))
	if got := q.p99(); got != 2000 {
		t.Fatalf("p99 %v ms, want 2000 (101 samples, nearest rank 100)", got)
	}
}
