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
		return usagef("usage: willow capacity plan --calibration report.json --growth uploads=9,downloads=1 [--budget compress=2,...] [--cores compress=4,...] [--nodes N --followers p50=200,p99=3000]")
	}
	fs, g := m.newFlags("capacity plan")
	cal := fs.String("calibration", "", "report.json of a calibration run (required)")
	growth := fs.String("growth", "uploads=9,downloads=1", "expected peak multiples")
	budget := fs.String("budget", "", "per-module CPU budget as a multiple of the calibration's CPU, e.g. compress=2")
	perNode := fs.Float64("cores-per-node", 1, "cores each node is provisioned with (default budget: nodes x this)")
	cores := fs.String("cores", "", "per-module absolute CPU budget in cores, overriding --budget")
	jpeg := fs.Float64("jpeg-cpu-ratio", 0.2, "compress CPU of jpeg q50 relative to heic (from make bench-compress)")
	mem := fs.Float64("mem-per-node", loadgen.DefaultMemPerNodeMiB, "memory budget per node, MiB")
	nic := fs.Float64("nic-mbps", loadgen.DefaultNICMBps, "network budget per node, MB/s each way")
	disk := fs.Float64("disk-mbps", loadgen.DefaultDiskMBps, "disk write budget per node, MB/s")
	fsyncs := fs.Float64("fsyncs-per-s", loadgen.DefaultFsyncsPerS, "fsync budget per node")
	fleet := fs.Int("nodes", 0, "fleet size (every role) to check the master, Redis and the edge against the curves")
	followers := fs.String("followers", "", "follower distribution, e.g. p50=200,p99=3000")
	redis := fs.String("redis", "server", "timeline Redis: server (one redis-server) or cluster (3 masters)")
	masterCores := fs.Float64("master-cores", 1, "the master's CPU budget, cores")
	viewWindow := fs.Duration("view-window", 0, "time over which a post's followers fetch it (edge hot key); default 5m")
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
	if *fleet < 0 {
		return usagef("--nodes must be >= 0")
	}
	if *redis != "server" && *redis != "cluster" {
		return usagef("--redis %q: want server or cluster", *redis)
	}
	central := loadgen.CentralConfig{Nodes: *fleet, Redis: *redis, MasterCores: *masterCores, ViewWindowS: viewWindow.Seconds()}
	if *followers != "" {
		if central.FollowersP50, central.FollowersP99, err = loadgen.ParseFollowers(*followers); err != nil {
			return usagef("--followers: %v", err)
		}
		if *fleet == 0 {
			return usagef("--followers needs --nodes")
		}
	}
	rep, err := loadgen.LoadCalibration(*cal)
	if err != nil {
		return err
	}
	plan, err := loadgen.MakePlan(rep, loadgen.PlanConfig{Growth: gr, Budget: bud, Cores: cor, CoresPerNode: *perNode, JPEGCPURatio: *jpeg,
		MemPerNodeMiB: *mem, NICMBps: *nic, DiskMBps: *disk, FsyncsPerS: *fsyncs, Central: central})
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
