package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"willow/loadgen"
)

func TestCapacityPlanCLI(t *testing.T) {
	rep := &loadgen.Report{Profile: "steady", Mode: "flex-off"}
	for i := 0; i < 5; i++ {
		rep.Seconds = append(rep.Seconds, loadgen.Second{T: i, Sampled: true,
			Upload:   loadgen.KindStats{Succeeded: 2, Bytes: 2_000_000},
			Download: loadgen.KindStats{Succeeded: 10, Bytes: 1_000_000},
			CPU:      map[string]float64{"upload": 0.1, "compress": 0.8, "edgecache": 0.05, "timeline": 0.01},
			Nodes:    map[string]int{"upload": 1, "compress": 1, "edgecache": 1, "timeline": 1},
			Resources: map[string]loadgen.RoleResources{
				"upload": {Nodes: 1, RSSBytes: 100 << 20, NetInBps: 2e6, NetOutBps: 1e5, DiskWriteBps: 2e6, FsyncsPerS: 20, Rated: true},
			},
		})
	}
	b, _ := json.Marshal(rep)
	cal := filepath.Join(t.TempDir(), "report.json")
	os.WriteFile(cal, b, 0o644)
	out, errs, code := run(t, "capacity", "plan", "--calibration", cal, "--nodes", "7000", "--followers", "p50=200,p99=3000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"bound by", "Central pieces", "redis (server)", "edge (hot key)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{
		{"--followers", "p50=200"},
		{"--followers", "p50=200,p99=3000"}, // without --nodes
		{"--nodes", "10", "--redis", "memcached"},
	} {
		_, errs, code := run(t, append([]string{"capacity", "plan", "--calibration", cal}, bad...)...)
		if code != 2 {
			t.Errorf("%v: exit %d (%s), want a usage error", bad, code, errs)
		}
	}
}
