package compress

import (
	"math"
	"testing"
	"time"
	"willow/internal/cpustat"
)

// TestTaskCost: each codec's seconds per task is its own moving average,
// follows a change in cost within a few dozen tasks, and keeps its last
// value while the codec is not used.
func TestTaskCost(t *testing.T) {
	var c taskCost
	if w, _ := c.snapshot(); w != nil {
		t.Fatal("snapshot before any task is not nil")
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	c.observe("heic", sec(0.9), sec(0.8))
	for i := 0; i < 40; i++ {
		c.observe("heic", sec(1.0), sec(0.9))
		c.observe("jpeg", sec(0.25), sec(0.2))
	}
	wall, cpu := c.snapshot()
	if h := wall["heic"]; math.Abs(h-1.0) > 0.02 {
		t.Fatalf("heic wall %v, want about 1.0", h)
	}
	if h := cpu["heic"]; math.Abs(h-0.9) > 0.02 {
		t.Fatalf("heic cpu %v, want about 0.9", h)
	}
	if j := wall["jpeg"]; j != 0.25 {
		t.Fatalf("jpeg %v, want 0.25", j)
	}
	// One slow task barely moves it.
	c.observe("jpeg", sec(2.5), sec(0.2))
	if w, _ := c.snapshot(); w["jpeg"] > 0.4 {
		t.Fatalf("one 2.5 s task took jpeg to %v", w["jpeg"])
	}
	for i := 0; i < 10; i++ {
		c.observe("heic", sec(0.5), 0) // thread usage unreadable: cpu kept
	}
	wall, cpu = c.snapshot()
	if j := wall["jpeg"]; j <= 0.25 || j > 0.4 {
		t.Fatalf("jpeg changed while unused: %v", j)
	}
	if h := wall["heic"]; h >= 1.0 || h <= 0.5 {
		t.Fatalf("heic %v after ten 0.5 s tasks, want between", h)
	}
	if h := cpu["heic"]; math.Abs(h-0.9) > 0.02 {
		t.Fatalf("heic cpu %v moved on tasks without a reading", h)
	}
	wall["heic"] = 0 // the snapshot is a copy
	if w, _ := c.snapshot(); w["heic"] == 0 {
		t.Fatal("snapshot shares the map")
	}
}

// TestThreadCPU: a busy loop on the locked thread counts, a sleep does not
// (the loop spins until the thread used 30 ms, however loaded the box).
func TestThreadCPU(t *testing.T) {
	done := threadCPU()
	t0, ok := cpustat.Thread()
	if !ok {
		t.Skip("RUSAGE_THREAD not readable here")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u, _ := cpustat.Thread(); u-t0 >= 30*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
	if cpu := done(); cpu < 30*time.Millisecond || cpu > 80*time.Millisecond {
		t.Fatalf("thread CPU %v for 30 ms busy + 100 ms asleep", cpu)
	}
}
