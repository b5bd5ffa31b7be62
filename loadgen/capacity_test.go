package loadgen_test

import (
	"bytes"
	"strings"
	"testing"

	"willow/flex"
	"willow/loadgen"
)

func calibration() *loadgen.Report {
	rep := &loadgen.Report{Profile: "steady", Mode: "flex-off"}
	for i := 0; i < 10; i++ {
		rep.Seconds = append(rep.Seconds, loadgen.Second{T: i,
			Upload:   loadgen.KindStats{Succeeded: 2, Bytes: 2_000_000},
			Download: loadgen.KindStats{Succeeded: 10, Bytes: 1_000_000},
			CPU:      map[string]float64{"upload": 0.1, "compress": 0.8, "edgecache": 0.05, "timeline": 0.01},
		})
	}
	return rep
}

func TestCapacityPlan(t *testing.T) {
	plan, err := loadgen.MakePlan(calibration(), loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9, "downloads": 1}})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]loadgen.ModulePlan{}
	for _, m := range plan.Modules {
		by[m.Module] = m
	}
	c := by["compress"]
	// 0.8 cores for 2 uploads/s = 400 ms per upload; budget 2 x 0.8 cores
	// = 4 uploads/s; demand 18/s; jpeg at 0.2 of the CPU gives 20/s.
	if !near(c.CPUPerReq, 400) || !near(c.Capacity, 4) || !near(c.Demand, 18) || !near(c.AfterFlex, 20) || c.Uncovered != 0 {
		t.Errorf("compress plan %+v", c)
	}
	if e := by["edgecache"]; e.Gap != 0 || e.Verdict != "fits" {
		t.Errorf("edgecache with 1x downloads should fit: %+v", e)
	}
	if u := by["upload"]; u.Uncovered == 0 {
		t.Errorf("upload front at 9x on a 2x budget should stay partly uncovered: %+v", u)
	}
	var out bytes.Buffer
	plan.WriteText(&out)
	if !strings.Contains(out.String(), "| compress |") || !strings.Contains(out.String(), "image_codec=jpeg") {
		t.Errorf("plan text:\n%s", out.String())
	}
	// The levers named are the shipped levels' values (flex/levels.yaml).
	blue, _ := flex.DefaultPlans().Plan(flex.LevelBlue)
	if want := "q" + blue[flex.KnobImageQuality] + " "; !strings.Contains(c.ClosedBy, want) || !strings.Contains(c.ClosedBy, "video_bitrate_kbps="+blue[flex.KnobVideoBitrateKbps]) {
		t.Errorf("compress closed by %q, want blue's image_quality and video_bitrate_kbps", c.ClosedBy)
	}
	red, _ := flex.DefaultPlans().Plan(flex.LevelRed)
	if e := by["edgecache"]; !strings.Contains(e.ClosedBy+by["timeline"].ClosedBy, "timeline_delay_ratio="+red[flex.KnobTimelineDelayRatio]) {
		t.Errorf("edge/timeline closed by %q / %q, want red's timeline_delay_ratio %s", e.ClosedBy, by["timeline"].ClosedBy, red[flex.KnobTimelineDelayRatio])
	}
}

func TestParseGrowth(t *testing.T) {
	if _, err := loadgen.ParseGrowth("uploads=9,downloads=1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "uploads", "uploads=-1", "cpu=2", "uploads=x"} {
		if _, err := loadgen.ParseGrowth(bad); err == nil {
			t.Errorf("ParseGrowth(%q) accepted", bad)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

func TestCapacityPlanBudgetsByNodes(t *testing.T) {
	cal := calibration()
	for i := range cal.Seconds {
		cal.Seconds[i].Nodes = map[string]int{"upload": 4, "compress": 2, "edgecache": 4, "timeline": 1}
	}
	plan, err := loadgen.MakePlan(cal, loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9}, CoresPerNode: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plan.Modules {
		switch m.Module {
		case "compress": // 2 nodes x 1 core / 0.4 s per upload
			if !near(m.BudgetCores, 2) || !near(m.Capacity, 5) {
				t.Errorf("compress %+v", m)
			}
		case "upload": // 4 cores / 0.05 s per upload = 80/s: fits 18/s
			if m.Verdict != "fits" {
				t.Errorf("upload %+v", m)
			}
		}
	}
}

// withResources gives each role of the calibration its own heartbeat
// resources, as a deploy/local run records them.
func withResources(cal *loadgen.Report, shared bool) *loadgen.Report {
	for i := range cal.Seconds {
		cal.Seconds[i].Nodes = map[string]int{"upload": 2, "compress": 2, "edgecache": 2, "timeline": 1}
		cal.Seconds[i].Resources = map[string]loadgen.RoleResources{
			// 2 uploads/s over 2 fronts: 40 MB/s in (so network binds at
			// 2 x 125 MB/s -> 12.5/s), 4 MB/s to disk, 400 fsyncs/s.
			"upload":    {Nodes: 2, RSSBytes: 2 * 200 << 20, NetInBps: 40e6, NetOutBps: 1e6, DiskWriteBps: 4e6, FsyncsPerS: 400, Rated: true, SharedProcess: shared},
			"compress":  {Nodes: 2, RSSBytes: 2 * 900 << 20, NetInBps: 1e6, NetOutBps: 1e6, Rated: true, SharedProcess: shared},
			"edgecache": {Nodes: 2, RSSBytes: 2 * 3000 << 20, NetInBps: 1e6, NetOutBps: 2e6, Rated: true, SharedProcess: shared},
			"timeline":  {Nodes: 1, RSSBytes: 50 << 20, NetInBps: 1e4, NetOutBps: 1e4, Rated: true, SharedProcess: shared},
		}
	}
	return cal
}

func TestCapacityIsTheMinimumOverResourcesAndNamesIt(t *testing.T) {
	plan, err := loadgen.MakePlan(withResources(calibration(), false), loadgen.PlanConfig{
		Growth: map[string]float64{"uploads": 9, "downloads": 1}, Cores: map[string]float64{"upload": 100, "edgecache": 100}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Warning != "" || plan.Shared {
		t.Errorf("per-process calibration warned: %q", plan.Warning)
	}
	by := map[string]loadgen.ModulePlan{}
	for _, m := range plan.Modules {
		by[m.Module] = m
	}
	up := by["upload"]
	// CPU 100 cores / 50 ms = 2000/s; memory 2 x 4096 MiB / 400 MiB x 2/s
	// = 41/s; network 2 x 125 / 40 MB/s x 2/s = 12.5/s; disk 2 x 200 / 4 x
	// 2 = 200/s; fsyncs 2 x 1000 / 400 x 2 = 10/s: fsyncs bind.
	if up.Binding != loadgen.ResFsyncs || !near(up.Capacity, 10) || !near(up.CapacityBy[loadgen.ResNetwork], 12.5) {
		t.Errorf("upload %+v: want fsyncs binding at 10/s, network 12.5/s", up)
	}
	if up.MemRSSMiB != 400 || up.NetInMBps != 40 || up.Nodes != 2 {
		t.Errorf("upload figures %+v", up)
	}
	// The edge: 2 x 3000 MiB RSS of 2 x 4096 at 10/s: memory binds (13.7/s).
	if e := by["edgecache"]; e.Binding != loadgen.ResMemory || e.MemRSSMiB != 6000 {
		t.Errorf("edgecache %+v: want memory binding", e)
	}
	if c := by["compress"]; c.Binding != loadgen.ResCPU {
		t.Errorf("compress %+v: want CPU binding", c)
	}
	// Each module has its own RSS now, not one process-wide figure.
	if by["upload"].MemRSSMiB == by["compress"].MemRSSMiB {
		t.Error("upload and compress report the same RSS")
	}
	var out bytes.Buffer
	plan.WriteText(&out)
	if !strings.Contains(out.String(), "| fsyncs |") || !strings.Contains(out.String(), "bound by") {
		t.Errorf("plan text does not name the binding resource:\n%s", out.String())
	}
}

func TestEmbeddedCalibrationSaysOnlyTotalsAreReal(t *testing.T) {
	plan, err := loadgen.MakePlan(withResources(calibration(), true), loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9}})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Shared || plan.Totals == nil || !strings.Contains(plan.Warning, "only the totals are real") {
		t.Fatalf("shared-process plan: shared %v totals %v warning %q", plan.Shared, plan.Totals, plan.Warning)
	}
	// Network is per node and summed; RSS is the process's once.
	if !near(plan.Totals.NetInMBps, 42.01) || !near(plan.Totals.RSSMiB, 3000) {
		t.Errorf("totals %+v", plan.Totals)
	}
	var out bytes.Buffer
	plan.WriteText(&out)
	if !strings.Contains(out.String(), "Totals (the only real figures") {
		t.Errorf("plan text:\n%s", out.String())
	}
}

func TestCentralPiecesReadTheCurves(t *testing.T) {
	cal := withResources(calibration(), false)
	plan, err := loadgen.MakePlan(cal, loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9, "downloads": 1},
		Cores:   map[string]float64{"timeline": 100, "edgecache": 100},
		Central: loadgen.CentralConfig{Nodes: 7000, FollowersP50: 200, FollowersP99: 3000}})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]loadgen.CentralCheck{}
	for _, c := range plan.Central {
		by[strings.Fields(c.Piece)[0]] = c
	}
	// Redis: fanoutCurve's one-server rows (session 14, full inboxes;
	// log-log between F = 100 and 1000) give ~1.1 ms per 200-follower
	// publish, which caps it near 890 publishes/s; 7000 nodes with the
	// calibration's mix (1 timeline in 7) give 1000 timeline nodes, far
	// more than that.
	r := by["redis"]
	if r.Limit < 100 || r.Limit > 1000 || r.Warning == "" || !strings.Contains(r.Warning, "before the timeline nodes") {
		t.Errorf("redis check %+v", r)
	}
	// The edge: 3000 followers over 300 s = 10 downloads/s on one edge,
	// against its per-node capacity (memory-bound, ~6.8/s).
	e := by["edge"]
	if !near(e.Demand, 10) || e.Warning == "" {
		t.Errorf("edge check %+v", e)
	}
	// BenchmarkFleet (session 11): 5000 nodes cost the master 0.54 cores of
	// heartbeats, so 7000 fit its default budget of one core, but not half
	// a core.
	if m := by["master"]; m.Figure == "" || m.Warning != "" || !strings.Contains(m.Figure, "measured to N=5000") {
		t.Errorf("master check %+v", m)
	}
	half, err := loadgen.MakePlan(cal, loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9},
		Cores: map[string]float64{"timeline": 100}, Central: loadgen.CentralConfig{Nodes: 7000, MasterCores: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range half.Central {
		if c.Piece == "master" && !strings.Contains(c.Warning, "runs out of CPU for heartbeats") {
			t.Errorf("7000 nodes on half a core: %+v", c)
		}
	}
	var out bytes.Buffer
	plan.WriteText(&out)
	if !strings.Contains(out.String(), "Central pieces") || !strings.Contains(out.String(), "WARNING: Redis runs out") {
		t.Errorf("plan text:\n%s", out.String())
	}
	// A smaller fleet where Redis keeps up gets no Redis warning.
	small, _ := loadgen.MakePlan(cal, loadgen.PlanConfig{Growth: map[string]float64{"uploads": 9},
		Cores: map[string]float64{"timeline": 100}, Central: loadgen.CentralConfig{Nodes: 7, FollowersP50: 200, FollowersP99: 300}})
	for _, c := range small.Central {
		if c.Warning != "" {
			t.Errorf("7-node fleet warned: %+v", c)
		}
	}
}

func TestParseFollowers(t *testing.T) {
	if p50, p99, err := loadgen.ParseFollowers("p50=200,p99=3000"); err != nil || p50 != 200 || p99 != 3000 {
		t.Errorf("got %v %v %v", p50, p99, err)
	}
	for _, bad := range []string{"", "p50=200", "p50=x,p99=1", "p50=300,p99=200", "p90=1,p99=2"} {
		if _, _, err := loadgen.ParseFollowers(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
