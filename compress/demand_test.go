package compress

import (
	"math"
	"testing"
	"time"
)

// TestDemand: the demand is the tasks in work or waiting per worker,
// averaged over about 10 s: one slow task on two workers stays at or under
// 0.5, a steady overload climbs past 2, and it decays once the tasks are
// done.
func TestDemand(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	d := newDemand(clock, 2)
	beat := func(n int) float64 { // n heartbeats one second apart
		var v float64
		for i := 0; i < n; i++ {
			now = now.Add(time.Second)
			v = d.value()
		}
		return v
	}
	if v := beat(3); v != 0 {
		t.Fatalf("idle demand %v", v)
	}
	// One task of 8 s on two workers: half the workers, for a while.
	d.add(1)
	if v := beat(8); v > 0.5 || v < 0.2 {
		t.Fatalf("one slow task: demand %v, want 0.2..0.5", v)
	}
	d.add(-1)
	// Six tasks in the node (two running, four waiting) for 20 s: 3 per worker.
	d.add(6)
	v := beat(20)
	if v < 2.5 || v > 3 {
		t.Fatalf("overload: demand %v, want 2.5..3", v)
	}
	d.add(-6)
	if v := beat(30); v > 0.2 {
		t.Fatalf("after the overload: demand %v, want < 0.2", v)
	}
	// Half a second in work between two reads counts as half.
	d = newDemand(clock, 1)
	d.add(1)
	now = now.Add(500 * time.Millisecond)
	d.add(-1)
	now = now.Add(500 * time.Millisecond)
	want := (1 - math.Exp(-0.1)) * 0.5
	if v := d.value(); math.Abs(v-want) > 1e-9 {
		t.Fatalf("half a second busy: %v, want %v", v, want)
	}
}
