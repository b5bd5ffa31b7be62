package loadgen_test

import (
	"bytes"
	"strings"
	"testing"

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
