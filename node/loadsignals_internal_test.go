package node

import (
	"testing"
	"time"

	willowv1 "willow/proto/willow/v1"
)

func TestRateCounterAndLoadHooks(t *testing.T) {
	var c RateCounter
	t0 := time.Unix(1000, 0)
	if r := c.Rate(t0); r != 0 {
		t.Fatalf("first rate %v, want 0", r)
	}
	c.Add(3)
	c.Add(2)
	if r := c.Rate(t0.Add(2 * time.Second)); r != 2.5 {
		t.Fatalf("rate %v, want 2.5/s", r)
	}
	if r := c.Rate(t0.Add(3 * time.Second)); r != 0 {
		t.Fatalf("rate after reset %v, want 0", r)
	}
	n := &Node{}
	n.AddLoad(func(l *willowv1.Load) { l.Backlog = 7 })
	n.AddLoad(func(l *willowv1.Load) { l.QueueP99Ms = l.GetQueueMs() * 2 })
	l := &willowv1.Load{QueueMs: 10}
	n.applyHooks(l)
	if l.GetBacklog() != 7 || l.GetQueueP99Ms() != 20 {
		t.Fatalf("load %v", l)
	}
}
