package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"willow/loadgen"
)

// cmdCapacity: willow capacity plan --calibration report.json --growth uploads=9,downloads=1.
func cmdCapacity(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 || args[0] != "plan" {
		return usagef("usage: willow capacity plan --calibration report.json --growth uploads=9,downloads=1 [--budget compress=2,...] [--cores compress=4,...]")
	}
	fs, g := m.newFlags("capacity plan")
	cal := fs.String("calibration", "", "report.json of a calibration run (required)")
	growth := fs.String("growth", "uploads=9,downloads=1", "expected peak multiples")
	budget := fs.String("budget", "", "per-module CPU budget as a multiple of the calibration's CPU, e.g. compress=2")
	perNode := fs.Float64("cores-per-node", 1, "cores each node is provisioned with (default budget: nodes x this)")
	cores := fs.String("cores", "", "per-module absolute CPU budget in cores, overriding --budget")
	jpeg := fs.Float64("jpeg-cpu-ratio", 0.2, "compress CPU of jpeg q50 relative to heic (from make bench-compress)")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *cal == "" {
		return usagef("need --calibration report.json")
	}
	gr, err := loadgen.ParseGrowth(*growth)
	if err != nil {
		return usagef("%v", err)
	}
	bud, err := parseModuleMap(*budget)
	if err != nil {
		return usagef("--budget: %v", err)
	}
	cor, err := parseModuleMap(*cores)
	if err != nil {
		return usagef("--cores: %v", err)
	}
	rep, err := loadgen.LoadCalibration(*cal)
	if err != nil {
		return err
	}
	plan, err := loadgen.MakePlan(rep, loadgen.PlanConfig{Growth: gr, Budget: bud, Cores: cor, CoresPerNode: *perNode, JPEGCPURatio: *jpeg})
	if err != nil {
		return err
	}
	if g.json {
		return json.NewEncoder(m.Stdout).Encode(plan)
	}
	plan.WriteText(m.Stdout)
	return nil
}

func parseModuleMap(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, usagef("%q: want MODULE=N", part)
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil || f <= 0 {
			return nil, usagef("%q: want a positive number", part)
		}
		out[k] = f
	}
	return out, nil
}
