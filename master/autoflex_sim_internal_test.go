package master

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// boxSim plays a load profile's uploads on the one-box cluster as the
// master sees them: seeded Poisson arrivals at the region a front (the
// load generator's region), heartbeats once a second from it and from
// region a's compress node (2 workers, 2 usable CPUs, the host's) with
// region b's front and compress node idle beside them, and the master's
// auto-flex tick every 500 ms reading those heartbeats through
// signalsFrom (the signal computation sampleSignals runs) into the
// engine and policy under test, its steps applied to the level.
//
// A photo's compress task ends a short upload after its arrival plus its
// wall time; the node's image_task_cpu_seconds and image_task_seconds are
// the moving averages compress keeps (taskCost: the first task's value,
// then 1/16 of each new one), so what the task CPU shares are matters as
// the box shows them: share(k, rng) is the k-th task's share of the
// process's CPU (k from 0).
type boxSim struct {
	pol   *AutoPolicy
	rate  func(t float64) float64 // uploads/s offered at t s into the load (0: the load is over)
	share func(k int, rng *rand.Rand) float64
	// lead is how long the cluster runs before the load starts (its
	// fronts heartbeat 0 arrivals); span is the load's length.
	lead, span time.Duration
}

// run plays one run with rng and returns the level steps taken and the
// seconds into the load of the first.
func (b boxSim) run(t *testing.T, s *Server, rng *rand.Rand) (steps []autoStep, first float64) {
	t.Helper()
	s.windows = map[string]*rateWindow{}
	s.edgeOut = map[string]edgeSample{}
	eng := newAutoEngine(b.pol, s.plans)
	snap := s.flexSnapshot()
	// The arrivals: a Poisson process of the profile's rate (thinning
	// under its highest rate), as the load generator draws them.
	const peak = 5.0
	var arrivals []float64 // seconds since the cluster start
	lead := b.lead.Seconds()
	for at := 0.0; ; {
		at += rng.ExpFloat64() / peak
		if at >= b.span.Seconds() {
			break
		}
		if rng.Float64()*peak < b.rate(at) {
			arrivals = append(arrivals, lead+at)
		}
	}
	// Each photo's task: done after an upload of 0.2-0.5 s and its wall.
	type task struct{ done, wall, cpu float64 }
	tasks := make([]task, len(arrivals))
	for k, at := range arrivals {
		cpu := b.share(k, rng)
		wall := cpu * (1 + 0.5*rng.Float64()) // a loaded box stretches a task
		tasks[k] = task{at + 0.2 + 0.3*rng.Float64() + wall, wall, cpu}
	}
	// Sorted by end, as the node observes them.
	slices.SortStableFunc(tasks, func(a, b task) int { return cmp.Compare(a.done, b.done) })
	info := func(id, role, region string) *willowv1.NodeInfo {
		return &willowv1.NodeInfo{Id: id, Role: role, Region: region}
	}
	front := &entry{info: info("upload-a-1", "upload", "a"), load: &willowv1.Load{}}
	comp := &entry{info: info("compress-a-1", "compress", "a"), load: &willowv1.Load{}}
	frontB := &entry{info: info("upload-b-1", "upload", "b"), load: &willowv1.Load{}}
	compB := &entry{info: info("compress-b-1", "compress", "b"), load: &willowv1.Load{}}
	entries := []*entry{front, comp, frontB, compB}
	// Heartbeat phases (seconds past each whole second) and the tick's.
	phase := []float64{rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64()}
	tickPhase := rng.Float64() * 0.5
	nextHB := make([]float64, len(entries))
	copy(nextHB, phase)
	lastBeat := -1.0 // the region a front's previous heartbeat
	next, done := 0, 0
	var wall, cpu float64 // the compress node's moving averages
	end := lead + b.span.Seconds()
	level := "normal"
	var mem autoMemory
	t0 := time.UnixMilli(1_700_000_000_000)
	for now := tickPhase; now < end; now += autoTick.Seconds() {
		for i, e := range entries {
			for nextHB[i] <= now {
				h := nextHB[i]
				nextHB[i]++
				l := &willowv1.Load{}
				switch e {
				case front:
					n := 0
					for next < len(arrivals) && arrivals[next] <= h {
						n++
						next++
					}
					begun := 0.0
					if lastBeat >= 0 {
						begun = float64(n) / (h - lastBeat)
					}
					lastBeat = h
					l.Gauges = map[string]float64{node.GaugeUploadsBegunPerS: begun, node.GaugeUploadsPerS: begun}
				case frontB:
					l.Gauges = map[string]float64{node.GaugeUploadsBegunPerS: 0, node.GaugeUploadsPerS: 0}
				case comp:
					for done < len(tasks) && tasks[done].done <= h {
						tk := tasks[done]
						if done == 0 {
							wall, cpu = tk.wall, tk.cpu
						} else {
							wall += (tk.wall - wall) / 16
							cpu += (tk.cpu - cpu) / 16
						}
						done++
					}
					if done > 0 {
						l.ImageTaskSeconds = map[string]float64{"heic": wall}
						l.ImageTaskCpuSeconds = map[string]float64{"heic": cpu}
					}
					fallthrough
				case compB:
					l.CompressWorkers, l.UsableCpus, l.Host = 2, 2, "box"
				}
				e.load, e.lastMs = l, t0.Add(time.Duration(h*float64(time.Second))).UnixMilli()
			}
		}
		at := t0.Add(time.Duration(now * float64(time.Second)))
		sig := s.signalsFrom(at, entries, snap)
		eng.observe(at, sig)
		st, ok := eng.decide(at, level, mem)
		if !ok {
			continue
		}
		if len(steps) == 0 {
			first = now - lead
		}
		steps = append(steps, st)
		level = st.Level
		mem.stepped(at.UnixMilli(), st)
	}
	return steps, first
}

// falseAlarms plays n runs of b from seed and returns the share of runs
// that stepped.
func (b boxSim) falseAlarms(t *testing.T, s *Server, seed uint64, n int) float64 {
	rng := rand.New(rand.NewPCG(seed, 17))
	stepped := 0
	for range n {
		if steps, _ := b.run(t, s, rng); len(steps) > 0 {
			stepped++
		}
	}
	return float64(stepped) / float64(n)
}

// loadedShare is a HEIC task's share of the process's CPU on a loaded
// one-box cluster: 0.9-1.3 s (every role in one process, so the share
// holds the other roles' CPU too: 1.0-1.3 s in the 01:21 rehearsal,
// docs/capacity.md, 0.77-0.89 s on the idle box at 01:08; the steady
// run's false alarm at 06:40 read 0.53 with about 1 upload/s, a share
// near 1.1).
func loadedShare(_ int, rng *rand.Rand) float64 { return 0.9 + 0.4*rng.Float64() }

// freshShare is a loaded box's share on a freshly started cluster: the
// first ten tasks run while the other roles start up and read 1.3-1.6 s
// (a steady run at load 13 read 1.47 at 0:07), then loadedShare's.
func freshShare(k int, rng *rand.Rand) float64 {
	if k < 10 {
		return 1.3 + 0.3*rng.Float64()
	}
	return loadedShare(k, rng)
}

func steadyRate(float64) float64 { return 0.5 }

// TestAutoFlexFalseAlarmSim: the steady profile (0.5 uploads/s for 60 s
// after 5 s of a cluster without traffic) should not step the level. Over
// 400 seeded runs with a loaded box's task CPU shares and 400 with a
// freshly started one's, the shipped policy steps in under 5 % and 12 %
// of runs (2.8 % and 7.8 % with this seed: the compress-forecast-rising
// rule on the arrivals' first minute, and on the fresh box the CPU rule
// on the first tasks' high shares). The CPU rule as session 10 shipped it
// (above 0.5 for 3 s) steps in 19.5 % and 54.2 % of the same runs, over
// both bounds: the test fails on it.
func TestAutoFlexFalseAlarmSim(t *testing.T) {
	s := newFlexServer(t, &memFlexStore{}, &fakeClock{t: t0})
	shipped := testAutoPolicy(t, string(shippedAutoPolicy))
	old := testAutoPolicy(t, string(shippedAutoPolicy))
	for i, r := range old.Rules {
		if r.Signal == SignalCompressCPUForecastNormal {
			old.Rules[i].Above, old.Rules[i].Dwell = 0.5, 3*time.Second
		}
	}
	const runs = 400
	for _, tc := range []struct {
		name  string
		share func(int, *rand.Rand) float64
		bound float64
	}{{"loaded", loadedShare, 0.05}, {"fresh", freshShare, 0.12}} {
		b := boxSim{pol: shipped, rate: steadyRate, share: tc.share, lead: 5 * time.Second, span: time.Minute}
		got := b.falseAlarms(t, s, 1, runs)
		b.pol = old
		was := b.falseAlarms(t, s, 1, runs)
		t.Logf("%s box: the shipped policy stepped in %.1f%% of %d steady runs, with the CPU rule at 0.5 for 3 s %.1f%%",
			tc.name, 100*got, runs, 100*was)
		if got >= tc.bound {
			t.Errorf("%s box: the shipped policy stepped in %.1f%% of steady runs, want under %.0f%%", tc.name, 100*got, 100*tc.bound)
		}
		if was < tc.bound {
			t.Errorf("%s box: the CPU rule at 0.5 for 3 s stepped in %.1f%% of steady runs, under the %.0f%% bound, which then tells nothing",
				tc.name, 100*was, 100*tc.bound)
		}
	}
}
