package loadgen

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The scale curves the capacity plan reads (issue 18), copied from
// BENCHMARKS.md. Update a row when its benchmark is re-measured; a curve
// with no rows is reported as not measured, never guessed.

// fanoutPoint is one row of BENCHMARKS.md "Timeline fan-out against the
// social graph" (make bench-timeline), delay ratio 0.
type fanoutPoint struct {
	followers float64
	p50Ms     float64 // publish latency (Redis-side Lua time dominates)
	p99Ms     float64
	trips     float64 // Redis round trips per publish
}

// fanoutCurve by Redis deployment: "server" (one redis-server) and
// "cluster" (3 masters), for followers whose inboxes are full (MaxInbox
// items each, the steady state of a feed: BenchmarkTimelineFanout's
// inbox=full rows, ratio 0), session 14, 2026-12-03 (BENCHMARKS.md
// "Session 14: the cluster at F = 1000 / 2000 / 5000, the whole curve"):
// medians of six runs of 40 publishes a row, on the shared 2-core box at
// load 2-5 (one server F = 1000-5000 12:58 UTC, load 3.3, p99 at 5000
// 15.8-22.0 ms; cluster F = 1000-5000 13:09 UTC, load 2.0-2.3, p99 at
// 5000 28.0-36.7 ms; F = 10 and 100 13:12 UTC, load 4.3-5.1).
var fanoutCurve = map[string][]fanoutPoint{
	"server": {
		{10, 0.49, 0.74, 4.1}, {100, 0.75, 1.40, 4.1}, {1000, 2.95, 7.16, 5.1}, {2000, 5.37, 8.34, 6.1}, {5000, 13.8, 16.3, 10.2},
	},
	"cluster": {
		{10, 0.76, 1.56, 6.4}, {100, 1.14, 3.55, 6.4}, {1000, 5.50, 9.42, 7.5}, {2000, 9.01, 14.1, 10.5}, {5000, 22.3, 29.5, 20.6},
	},
}

// fleetPoint is one row of BenchmarkFleet in ./master (N simulated nodes
// heartbeating at 1 Hz with a Watch stream each).
type fleetPoint struct {
	nodes          float64
	cpuPerBeatUs   float64 // master CPU per heartbeat
	rssMiB         float64
	routeP99Ms     float64
	propagateP99Ms float64 // flex change to every watcher
}

// fleetCurve: BenchmarkFleet (BENCHMARKS.md, 2026-12-03 session 14:
// nodes on the streamed heartbeat with sparse answers; one run of the
// three sizes, 12:57-13:00 UTC, box load 1.9-2.4 on the shared 2-core
// box). Every size served the heartbeats offered (about N a second).
// Route p99 is the SDK's (4 endpoints a list, from a caller process of
// its own). 22 more N = 5000 runs of the same tree that session (load
// 0.2-8.1) gave 72-90 µs a heartbeat, RSS 273-295 MiB, propagation p99
// 81-217 ms (884 ms once at load 6.8) and Route p99 2.7-104 ms, median
// 5.0 ms of the 23 (the tail is the wait for a core, not under control).
// The master and the simulated fleet share the box's two cores, so
// these are a master with about half a box, not a dedicated one.
var fleetCurve = []fleetPoint{
	{nodes: 100, cpuPerBeatUs: 1140, rssMiB: 43, routeP99Ms: 1.8, propagateP99Ms: 9.7},
	{nodes: 1000, cpuPerBeatUs: 190, rssMiB: 81, routeP99Ms: 1.6, propagateP99Ms: 19.7},
	{nodes: 5000, cpuPerBeatUs: 87, rssMiB: 292, routeP99Ms: 7.2, propagateP99Ms: 91.6},
}

// interp evaluates a curve at x, linearly in log-log between the points
// and extrapolated from the last two beyond them.
func interp(xs, ys []float64, x float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	if len(xs) == 1 || x <= xs[0] {
		return ys[0] * math.Max(x, 1) / math.Max(xs[0], 1) // proportional below the first point
	}
	i := sort.SearchFloat64s(xs, x)
	if i >= len(xs) {
		i = len(xs) - 1
	}
	x0, x1, y0, y1 := xs[i-1], xs[i], ys[i-1], ys[i]
	if y0 <= 0 || y1 <= 0 {
		return y0 + (y1-y0)*(x-x0)/(x1-x0)
	}
	t := (math.Log(x) - math.Log(x0)) / (math.Log(x1) - math.Log(x0))
	return math.Exp(math.Log(y0) + t*(math.Log(y1)-math.Log(y0)))
}

// CentralConfig describes the fleet for the central-piece checks.
type CentralConfig struct {
	// Nodes is the fleet size (every role), which the master serves.
	Nodes int
	// FollowersP50 and FollowersP99 describe the follower distribution.
	FollowersP50, FollowersP99 float64
	// Redis is "server" (one redis-server, default) or "cluster".
	Redis string
	// MasterCores is the master's CPU budget; default 1.
	MasterCores float64
	// ViewWindowS is the seconds over which a post's followers fetch it
	// (the hot-key model of the edge); default 300.
	ViewWindowS float64
}

// CentralCheck is one central piece checked against its curve.
type CentralCheck struct {
	Piece   string  `json:"piece"`
	Figure  string  `json:"figure"`
	Limit   float64 `json:"limit_per_s,omitempty"`
	Serves  float64 `json:"modules_capacity_per_s,omitempty"`
	Demand  float64 `json:"demand_per_s,omitempty"`
	Warning string  `json:"warning,omitempty"`
}

// checkCentral reads the curves for the fleet described by c. The fleet is
// taken to keep the calibration's mix of roles, so a module's fleet-wide
// capacity is its per-node capacity times its share of c.Nodes.
func checkCentral(p *Plan, c CentralConfig, calNodes map[string]int, growth func(string) float64) []CentralCheck {
	if c.Redis == "" {
		c.Redis = "server"
	}
	if c.MasterCores <= 0 {
		c.MasterCores = 1
	}
	if c.ViewWindowS <= 0 {
		c.ViewWindowS = 300
	}
	total := 0
	for _, k := range calNodes {
		total += k
	}
	mod := map[string]ModulePlan{}
	for _, m := range p.Modules {
		mod[m.Module] = m
	}
	// fleetCap scales a module's calibrated capacity to the fleet.
	fleetCap := func(name string) (perNode, fleet, nodes float64) {
		m := mod[name]
		k := float64(max(m.Nodes, 1))
		perNode = m.Capacity / k
		nodes = float64(c.Nodes) * k / float64(max(total, 1))
		return perNode, perNode * nodes, nodes
	}
	var out []CentralCheck

	// The master: every node heartbeats at 1 Hz and holds a Watch.
	if len(fleetCurve) == 0 {
		out = append(out, CentralCheck{Piece: "master", Figure: "BenchmarkFleet curve not measured yet (loadgen/curves.go fleetCurve is empty): the master is not checked"})
	} else {
		var xs, cpu, prop, route []float64
		for _, f := range fleetCurve {
			xs, cpu = append(xs, f.nodes), append(cpu, f.cpuPerBeatUs*f.nodes/1e6)
			prop, route = append(prop, f.propagateP99Ms), append(route, f.routeP99Ms)
		}
		n := float64(c.Nodes)
		cores := interp(xs, cpu, n)
		ck := CentralCheck{Piece: "master", Figure: fmt.Sprintf("%d nodes: %.2f cores of heartbeats (budget %.1f), Route p99 %.1f ms, propagation p99 %.0f ms (measured to N=%.0f)",
			c.Nodes, cores, c.MasterCores, interp(xs, route, n), interp(xs, prop, n), xs[len(xs)-1])}
		if cores > c.MasterCores {
			ck.Warning = fmt.Sprintf("the master runs out of CPU for heartbeats before the fleet of %d nodes it serves", c.Nodes)
		} else if pp := interp(xs, prop, n); pp > 1000 {
			ck.Warning = fmt.Sprintf("knob propagation p99 %.0f ms breaks the 1 s invariant at %d nodes", pp, c.Nodes)
		}
		out = append(out, ck)
	}

	// A Redis master (or slot owner) runs the timeline's fan-out scripts one
	// at a time: its publishes per second are 1000 / the publish time at the
	// typical author's follower count.
	if pts := fanoutCurve[c.Redis]; len(pts) > 0 && c.FollowersP50 > 0 {
		var xs, p50, p99 []float64
		for _, f := range pts {
			xs, p50, p99 = append(xs, f.followers), append(p50, f.p50Ms), append(p99, f.p99Ms)
		}
		masters := 1.0
		if c.Redis == "cluster" {
			masters = 3
		}
		perPublish := interp(xs, p50, c.FollowersP50)
		limit := masters * 1000 / perPublish
		_, serves, _ := fleetCap("timeline")
		ck := CentralCheck{Piece: "redis (" + c.Redis + ")", Limit: limit, Serves: serves, Demand: mod["timeline"].Demand,
			Figure: fmt.Sprintf("publish to %.0f followers (p50) takes %.1f ms of Redis time: %.0f publishes/s; a p99 author (%.0f followers) waits %.0f ms",
				c.FollowersP50, perPublish, limit, c.FollowersP99, interp(xs, p99, math.Max(c.FollowersP99, c.FollowersP50)))}
		if serves > 0 && limit < serves {
			ck.Warning = fmt.Sprintf("Redis runs out at %.0f publishes/s, before the timeline nodes it serves (%.0f/s across the fleet)", limit, serves)
		}
		out = append(out, ck)
	}

	// An edge: a post's variants live on one edge of the ring (its owner),
	// so a p99 author's followers all fetch from that one node.
	if c.FollowersP99 > 0 {
		perNode, _, _ := fleetCap("edgecache")
		hot := c.FollowersP99 / c.ViewWindowS * growth("downloads")
		ck := CentralCheck{Piece: "edge (hot key)", Limit: perNode, Demand: hot,
			Figure: fmt.Sprintf("a %.0f-follower post fetched over %.0f s is %.1f downloads/s on its owner edge; one edge serves %.1f/s", c.FollowersP99, c.ViewWindowS, hot, perNode)}
		if perNode > 0 && hot > perNode {
			ck.Warning = fmt.Sprintf("one edge runs out (%.1f/s) under a single p99 author's post (%.1f/s) before the edge tier does", perNode, hot)
		}
		out = append(out, ck)
	}
	return out
}

// ParseFollowers parses "p50=200,p99=3000".
func ParseFollowers(s string) (p50, p99 float64, err error) {
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, perr := strconv.ParseFloat(v, 64)
		if !ok || perr != nil || f <= 0 || f > 1e8 {
			return 0, 0, fmt.Errorf("%q: want p50=N,p99=N with positive N", part)
		}
		switch k {
		case "p50":
			p50 = f
		case "p99":
			p99 = f
		default:
			return 0, 0, fmt.Errorf("%q: want p50 or p99", k)
		}
	}
	if p50 == 0 || p99 == 0 || p99 < p50 {
		return 0, 0, fmt.Errorf("%q: need p50 and p99, p99 >= p50", s)
	}
	return p50, p99, nil
}
