package master

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	willowv1 "willow/proto/willow/v1"
)

type countingProber struct {
	mu     sync.Mutex
	probed map[string]int
}

func (p *countingProber) Probe(_ context.Context, addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed[addr]++
	return nil
}

// With more healthy nodes than ProbeBudget, a round probes ProbeBudget of
// them, taking turns so that every one is probed within
// ceil(healthy/budget) rounds; probing nodes are probed every round, and
// nodes in their protection window or without heartbeats never.
func TestProbeBudgetTakesTurns(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	p := &countingProber{probed: map[string]int{}}
	s := &Server{cfg: Config{ProbeBudget: 3, MissedAfter: 3 * time.Second, ProbeTimeout: time.Second}, prober: p}
	var es []*entry
	add := func(id string, h health, lastMs int64) {
		es = append(es, &entry{info: &willowv1.NodeInfo{Id: id, Addr: id + ":1"}, lastMs: lastMs, h: h})
	}
	for i := range 7 {
		add(fmt.Sprint("healthy-", i), health{State: StateHealthy}, now.UnixMilli())
	}
	add("probing", health{State: StateProbing}, now.UnixMilli())
	add("protected", health{State: StateEjected, ProtectUntilMs: now.UnixMilli() + 10_000}, now.UnixMilli())
	add("dead", health{State: StateHealthy}, now.UnixMilli()-10_000)
	for round := range 3 {
		got := s.probeAll(context.Background(), es, now)
		if len(got) != 4 {
			t.Fatalf("round %d probed %d nodes (%v), want the probing one and 3 healthy", round, len(got), got)
		}
		if _, ok := got["probing"]; !ok {
			t.Fatalf("round %d left out the probing node: %v", round, got)
		}
	}
	for i := range 7 {
		if n := p.probed[fmt.Sprintf("healthy-%d:1", i)]; n < 1 || n > 2 {
			t.Errorf("healthy-%d probed %d times in 3 rounds, want 1 or 2", i, n)
		}
	}
	if p.probed["protected:1"] != 0 || p.probed["dead:1"] != 0 {
		t.Errorf("probed a protected or dead node: %v", p.probed)
	}
	// Under the budget every healthy node is probed every round.
	s.cfg.ProbeBudget = 100
	if got := s.probeAll(context.Background(), es, now); len(got) != 8 {
		t.Fatalf("under the budget: probed %d, want 8", len(got))
	}
}

// timingProber records when each address's probe started.
type timingProber struct {
	mu      sync.Mutex
	started map[string]time.Time
}

func (p *timingProber) Probe(_ context.Context, addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started[addr] = time.Now()
	return nil
}

// A round's probes start paced over half of ProbeInterval, a group every
// probeSlot, not all at once; every one is still probed in the round.
func TestProbeRoundPaced(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	p := &timingProber{started: map[string]time.Time{}}
	s := &Server{cfg: Config{ProbeBudget: 500, MissedAfter: 3 * time.Second, ProbeTimeout: time.Second,
		ProbeInterval: 200 * time.Millisecond}, prober: p}
	var es []*entry
	for i := range 40 {
		id := fmt.Sprint("healthy-", i)
		es = append(es, &entry{info: &willowv1.NodeInfo{Id: id, Addr: id + ":1"}, lastMs: now.UnixMilli(), h: health{State: StateHealthy}})
	}
	begin := time.Now()
	got := s.probeAll(context.Background(), es, now)
	took := time.Since(begin)
	if len(got) != 40 || len(p.started) != 40 {
		t.Fatalf("probed %d (%d started), want 40", len(got), len(p.started))
	}
	var first, last time.Time
	for _, at := range p.started {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	// 40 probes over 100 ms in 20 slots of 5 ms: the last group starts
	// at 95 ms.
	if span := last.Sub(first); span < 90*time.Millisecond || took > s.cfg.ProbeInterval {
		t.Fatalf("probe starts spanned %v (round %v), want about 95 ms, within the 200 ms interval", span, took)
	}
	// A cancelled round stops starting probes.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.started = map[string]time.Time{}
	if got := s.probeAll(ctx, es, now); len(got) >= 40 {
		t.Fatalf("a cancelled round probed %d of 40", len(got))
	}
}
