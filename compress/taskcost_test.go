package compress

import (
	"math"
	"os"
	"strings"
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

// TestCPUShare: the process CPU used while tasks run is split evenly
// among the tasks running; CPU used while none runs is nobody's.
func TestCPUShare(t *testing.T) {
	var clock time.Duration
	c := cpuShare{read: func() time.Duration { return clock }}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	clock = ms(500) // before any task: nobody's
	endA := c.start()
	clock += ms(100) // A alone
	endB := c.start()
	clock += ms(300) // A and B: 150 each
	if b := endB(); b != ms(150) {
		t.Fatalf("B %v, want 150ms", b)
	}
	clock += ms(50) // A alone again
	if a := endA(); a != ms(300) {
		t.Fatalf("A %v, want 100+150+50 = 300ms", a)
	}
	clock += ms(1000) // idle
	endC := c.start()
	clock += ms(20)
	if got := endC(); got != ms(20) {
		t.Fatalf("C %v after an idle second, want 20ms", got)
	}
}

// TestCPUShareCountsOtherThreads: CPU a task's work uses on another
// goroutine (as the resize does, and x265 on its own threads) counts in
// its share (the loop spins until the process used 30 ms more, however
// loaded the box).
func TestCPUShareCountsOtherThreads(t *testing.T) {
	var c cpuShare
	end := c.start()
	t0 := cpustat.Process()
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		for cpustat.Process()-t0 < 30*time.Millisecond && time.Now().Before(deadline) {
		}
	}()
	<-done
	if cpu := end(); cpu < 30*time.Millisecond {
		t.Fatalf("share %v, want at least the 30 ms spun on another goroutine", cpu)
	}
}

// TestHostID: every process on one kernel names the same host, from the
// boot id where Linux has one.
func TestHostID(t *testing.T) {
	id := hostID()
	if id == "" || id != hostID() {
		t.Fatalf("host %q, then %q: want one non-empty name", id, hostID())
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil && id != "boot:"+strings.TrimSpace(string(b)) {
		t.Fatalf("host %q, want the boot id %q", id, b)
	}
}
