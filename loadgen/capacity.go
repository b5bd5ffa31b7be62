package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"willow/flex"
)

// PlanConfig configures a capacity plan. Zero values mean the default.
type PlanConfig struct {
	// Growth is the expected peak multiple per kind: "uploads", "downloads".
	Growth map[string]float64
	// Budget, when set for a module, is its CPU budget at the peak as a
	// multiple of the CPU it used in the calibration (DESIGN.md: compress
	// budgeted for +1x, so 2).
	Budget map[string]float64
	// CoresPerNode is the CPU each node is provisioned with; a module's
	// default budget is its healthy nodes in the calibration times this
	// (default 1). When the calibration has no node counts, the default
	// budget is 2x the calibration's CPU.
	CoresPerNode float64
	// Cores, when set for a module, is its absolute CPU budget at the
	// peak in cores, overriding Budget.
	Cores map[string]float64
	// JPEGCPURatio is the compress CPU of the jpeg q50 path relative to
	// HEIC (measured by `make bench-compress`); default 0.2.
	JPEGCPURatio float64
	// TimelineDelay is the ratio of held notifications; default the red
	// level's timeline_delay_ratio (flex/levels.yaml). Held notifications
	// stop the downloads they would cause.
	TimelineDelay float64
	// LowPriorityShare is the share of uploads from businesses the red
	// level sheds; default from the calibration's business mix, else 0.1.
	LowPriorityShare float64
	// Per-node budgets of the other resources; zero means the default.
	MemPerNodeMiB float64 // default DefaultMemPerNodeMiB
	NICMBps       float64 // network, MB/s each way; default DefaultNICMBps
	DiskMBps      float64 // disk writes; default DefaultDiskMBps
	FsyncsPerS    float64 // default DefaultFsyncsPerS
	// Central configures the checks of the central pieces against the
	// curves (Nodes > 0 turns them on).
	Central CentralConfig
}

// Default per-node budgets.
const (
	DefaultMemPerNodeMiB = 4096
	DefaultNICMBps       = 125 // 1 Gbit/s
	DefaultDiskMBps      = 200
	DefaultFsyncsPerS    = 1000
)

// Resources a module's capacity can be bound by.
const (
	ResCPU     = "cpu"
	ResMemory  = "memory"
	ResNetwork = "network"
	ResDisk    = "disk"
	ResFsyncs  = "fsyncs"
)

// ModulePlan is the plan for one module.
type ModulePlan struct {
	Module      string  `json:"module"`
	Driver      string  `json:"driver"` // uploads | downloads
	BaseRate    float64 `json:"base_rate_per_s"`
	CPUPerReq   float64 `json:"cpu_ms_per_request"`
	CPUCores    float64 `json:"cpu_cores_at_base"`
	BudgetCores float64 `json:"budget_cores"`
	MemRSSMiB   float64 `json:"mem_rss_mib"`
	NetMBps     float64 `json:"net_mb_per_s_at_base"`
	// Measured per module from heartbeats (0 when not reported).
	Nodes      int     `json:"nodes"`
	NetInMBps  float64 `json:"net_in_mb_per_s_at_base"`
	NetOutMBps float64 `json:"net_out_mb_per_s_at_base"`
	DiskMBps   float64 `json:"disk_write_mb_per_s_at_base"`
	FsyncsPerS float64 `json:"fsyncs_per_s_at_base"`
	// CapacityBy is the rate each resource's budget allows; Capacity is
	// their minimum and Binding names it.
	CapacityBy   map[string]float64 `json:"capacity_by_resource_per_s"`
	Binding      string             `json:"binding"`
	Capacity     float64            `json:"capacity_per_s"`
	Demand       float64            `json:"demand_per_s"`
	Growth       float64            `json:"growth_it_can_take"`
	Gap          float64            `json:"gap_per_s"`
	ClosedBy     string             `json:"closed_by"`
	AfterFlex    float64            `json:"capacity_after_flex_per_s"`
	Uncovered    float64            `json:"uncovered_per_s"`
	Verdict      string             `json:"verdict"`
	DeferredNote string             `json:"note,omitempty"`
}

// Plan is the pre-holiday capacity review.
type Plan struct {
	Calibration string             `json:"calibration"`
	Growth      map[string]float64 `json:"growth"`
	Modules     []ModulePlan       `json:"modules"`
	// Warning says when the figures cannot be trusted per module.
	Warning string `json:"warning,omitempty"`
	// Shared says every role ran in one process (--embedded, willow up):
	// only Totals are real.
	Shared bool    `json:"shared_process"`
	Totals *Totals `json:"totals,omitempty"`
	// Budgets are the per-node budgets used.
	Budgets map[string]float64 `json:"budgets_per_node"`
	// Central are the central pieces checked against the curves.
	Central []CentralCheck `json:"central,omitempty"`
	// Notes say what was not measured.
	Notes []string `json:"notes,omitempty"`
}

// Totals are the whole calibration cluster's figures at the base rate.
type Totals struct {
	CPUCores   float64 `json:"cpu_cores"`
	RSSMiB     float64 `json:"rss_mib"`
	NetInMBps  float64 `json:"net_in_mb_per_s"`
	NetOutMBps float64 `json:"net_out_mb_per_s"`
	DiskMBps   float64 `json:"disk_write_mb_per_s"`
	FsyncsPerS float64 `json:"fsyncs_per_s"`
}

// LoadCalibration reads a report.json written by `willow load run` (a
// single run, or the flex-off run of a --compare).
func LoadCalibration(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Comparison
	if err := json.Unmarshal(b, &c); err == nil && c.Off != nil {
		return c.Off, nil
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("calibration %s: %w", path, err)
	}
	if len(r.Seconds) == 0 {
		return nil, fmt.Errorf("calibration %s: no samples", path)
	}
	return &r, nil
}

// ParseGrowth parses "uploads=9,downloads=1".
func ParseGrowth(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || (k != "uploads" && k != "downloads") {
			return nil, fmt.Errorf("growth %q: want uploads=N,downloads=N", part)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1000 {
			return nil, fmt.Errorf("growth %s: %q is not a positive number", k, v)
		}
		out[k] = f
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("growth: empty")
	}
	return out, nil
}

// roleUse is a role's mean resource use over the calibration.
type roleUse struct {
	rssBytes                 float64 // all the role's nodes
	netIn, netOut, disk, fsy float64 // per second
	nodes                    int
	rated, shared            bool
}

// MakePlan computes the capacity plan from a calibration run. A module's
// capacity is the minimum over its resources of the rate each budget
// allows: CPU (budgeted cores / CPU per request), memory (per-node budget
// x nodes against the measured RSS, taken as growing with load), network
// (NIC budget each way against the bytes in or out) and, where the module
// writes to disk, disk bytes and fsyncs. Binding names the minimum.
func MakePlan(cal *Report, cfg PlanConfig) (*Plan, error) {
	if cfg.JPEGCPURatio <= 0 {
		cfg.JPEGCPURatio = 0.2
	}
	plans := flex.DefaultPlans()
	blue, err := plans.Plan(flex.LevelBlue)
	if err != nil {
		return nil, err
	}
	red, err := plans.Plan(flex.LevelRed)
	if err != nil {
		return nil, err
	}
	if cfg.TimelineDelay <= 0 {
		cfg.TimelineDelay, _ = strconv.ParseFloat(red[flex.KnobTimelineDelayRatio], 64)
	}
	if cfg.LowPriorityShare <= 0 {
		cfg.LowPriorityShare = 0.1
	}
	if cfg.MemPerNodeMiB <= 0 {
		cfg.MemPerNodeMiB = DefaultMemPerNodeMiB
	}
	if cfg.NICMBps <= 0 {
		cfg.NICMBps = DefaultNICMBps
	}
	if cfg.DiskMBps <= 0 {
		cfg.DiskMBps = DefaultDiskMBps
	}
	if cfg.FsyncsPerS <= 0 {
		cfg.FsyncsPerS = DefaultFsyncsPerS
	}
	growth := func(kind string) float64 {
		if g, ok := cfg.Growth[kind]; ok {
			return g
		}
		return 1
	}
	if cfg.CoresPerNode <= 0 {
		cfg.CoresPerNode = 1
	}
	// Calibration figures over the seconds where something was served.
	var upRate, downRate, upBytes, downBytes, rss float64
	cpu := map[string]float64{}
	nodes := map[string]int{}
	use := map[string]*roleUse{}
	rated := map[string]float64{}
	n := 0.0
	for _, s := range cal.Seconds {
		if s.Upload.Succeeded == 0 && s.Download.Succeeded == 0 {
			continue
		}
		n++
		upRate += float64(s.Upload.Succeeded)
		downRate += float64(s.Download.Succeeded)
		upBytes += float64(s.Upload.Bytes)
		downBytes += float64(s.Download.Bytes)
		for k, v := range s.CPU {
			cpu[k] += v
		}
		for k, v := range s.Nodes {
			nodes[k] = max(nodes[k], v)
		}
		if s.MemRSSBytes > rss {
			rss = s.MemRSSBytes
		}
		for role, rr := range s.Resources {
			u := use[role]
			if u == nil {
				u = &roleUse{}
				use[role] = u
			}
			u.rssBytes = max(u.rssBytes, rr.RSSBytes)
			u.nodes = max(u.nodes, rr.Nodes)
			u.shared = u.shared || rr.SharedProcess
			if rr.Rated {
				u.rated = true
				rated[role]++
				u.netIn += rr.NetInBps
				u.netOut += rr.NetOutBps
				u.disk += rr.DiskWriteBps
				u.fsy += rr.FsyncsPerS
			}
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("calibration has no second with a success")
	}
	upRate, downRate, upBytes, downBytes = upRate/n, downRate/n, upBytes/n, downBytes/n
	for k := range cpu {
		cpu[k] /= n
	}
	shared := false
	for role, u := range use {
		if c := rated[role]; c > 0 {
			u.netIn, u.netOut, u.disk, u.fsy = u.netIn/c, u.netOut/c, u.disk/c, u.fsy/c
		}
		shared = shared || u.shared
	}
	p := &Plan{Calibration: cal.Profile + " (" + cal.Mode + ")", Growth: cfg.Growth, Shared: shared,
		Budgets: map[string]float64{"cpu_cores": cfg.CoresPerNode, "mem_mib": cfg.MemPerNodeMiB, "nic_mb_per_s": cfg.NICMBps,
			"disk_mb_per_s": cfg.DiskMBps, "fsyncs_per_s": cfg.FsyncsPerS}}
	if len(use) == 0 {
		p.Notes = append(p.Notes, "the calibration has no per-role resource counters (recorded before heartbeats carried them): "+
			"capacity is CPU only and RSS is the largest process's")
	}
	switch {
	case shared:
		p.Totals = totals(cpu, use)
		p.Warning = fmt.Sprintf("every role ran in one process (--embedded / willow up), so only the totals are real: "+
			"the process used %.2f cores, %.0f MiB RSS, wrote %.2f MB/s and %.1f fsyncs/s to disk; the per-module CPU, RSS and disk "+
			"figures below are that process's, repeated, and the capacities built on them are not per module "+
			"(network bytes are counted per node and are per module); calibrate on deploy/local or a real cluster",
			p.Totals.CPUCores, p.Totals.RSSMiB, p.Totals.DiskMBps, p.Totals.FsyncsPerS)
	case sameCPU(cpu):
		p.Warning = "every role reported the same CPU: the calibration ran all services in one process (willow up / --embedded), " +
			"so only the totals are real and per-module CPU is the whole process's; calibrate on deploy/local or a real cluster for per-module figures"
	}
	type mod struct {
		name, driver string
		rate, net    float64
		// flex returns the demand the module's flex levels take off (a
		// factor on every resource) or the CPU they save (cpuOnly).
		flex func() (factor float64, cpuOnly bool, how string)
	}
	mods := []mod{
		{"upload", "uploads", upRate, upBytes / 1e6, func() (float64, bool, string) {
			return 1 / (1 - cfg.LowPriorityShare), false, fmt.Sprintf("retries=off, coarse shed of low-priority businesses (%.0f%% of uploads), overflow to pool1", cfg.LowPriorityShare*100)
		}},
		{"compress", "uploads", upRate, upBytes / 1e6, func() (float64, bool, string) {
			return 1 / cfg.JPEGCPURatio, true, fmt.Sprintf("image_codec=%s q%s (compress CPU x%.2f), video_bitrate_kbps=%s armed hours ahead; pool1 defers the rest",
				blue[flex.KnobImageCodec], blue[flex.KnobImageQuality], cfg.JPEGCPURatio, blue[flex.KnobVideoBitrateKbps])
		}},
		{"edgecache", "downloads", downRate, downBytes / 1e6, func() (float64, bool, string) {
			return 1 / (1 - cfg.TimelineDelay), false, fmt.Sprintf("timeline_delay_ratio=%.1f (held notifications trigger no downloads), shed_ratio.prefetch", cfg.TimelineDelay)
		}},
		{"timeline", "uploads", upRate, 0, func() (float64, bool, string) {
			return 1 / (1 - cfg.TimelineDelay), false, fmt.Sprintf("timeline_delay_ratio=%.1f, release capped by timeline_release_per_s", cfg.TimelineDelay)
		}},
	}
	for _, m := range mods {
		mp := ModulePlan{Module: m.name, Driver: m.driver, BaseRate: m.rate, CPUCores: cpu[m.name], MemRSSMiB: rss / (1 << 20), NetMBps: m.net,
			CapacityBy: map[string]float64{}}
		u := use[m.name]
		mp.Nodes = nodes[m.name]
		if u != nil {
			mp.MemRSSMiB = u.rssBytes / (1 << 20)
			mp.Nodes = max(mp.Nodes, u.nodes)
			if u.rated {
				mp.NetInMBps, mp.NetOutMBps = u.netIn/1e6, u.netOut/1e6
				mp.NetMBps = mp.NetInMBps + mp.NetOutMBps
				mp.DiskMBps, mp.FsyncsPerS = u.disk/1e6, u.fsy
			}
		}
		if m.rate > 0 {
			mp.CPUPerReq = 1000 * cpu[m.name] / m.rate
		}
		mp.Demand = m.rate * growth(m.driver)
		if mp.CPUPerReq <= 0 {
			mp.Verdict = "not measured (no CPU or traffic in the calibration)"
			p.Modules = append(p.Modules, mp)
			continue
		}
		var cores float64
		switch {
		case cfg.Cores[m.name] > 0:
			cores = cfg.Cores[m.name]
		case cfg.Budget[m.name] > 0:
			cores = cfg.Budget[m.name] * cpu[m.name]
		case nodes[m.name] > 0:
			cores = float64(nodes[m.name]) * cfg.CoresPerNode
		default:
			cores = 2 * cpu[m.name]
		}
		mp.BudgetCores = cores
		k := float64(max(mp.Nodes, 1))
		mp.CapacityBy[ResCPU] = cores / (mp.CPUPerReq / 1000)
		if u != nil && u.rssBytes > 0 {
			// Conservative: RSS taken as growing in proportion to load.
			mp.CapacityBy[ResMemory] = m.rate * cfg.MemPerNodeMiB * k / mp.MemRSSMiB
		}
		if net := max(mp.NetInMBps, mp.NetOutMBps); net > 0 {
			mp.CapacityBy[ResNetwork] = m.rate * cfg.NICMBps * k / net
		}
		if mp.DiskMBps > 0 {
			mp.CapacityBy[ResDisk] = m.rate * cfg.DiskMBps * k / mp.DiskMBps
		}
		if mp.FsyncsPerS > 0 {
			mp.CapacityBy[ResFsyncs] = m.rate * cfg.FsyncsPerS * k / mp.FsyncsPerS
		}
		mp.Binding, mp.Capacity = binding(mp.CapacityBy)
		if m.rate > 0 {
			mp.Growth = mp.Capacity / m.rate
		}
		mp.Gap = math.Max(0, mp.Demand-mp.Capacity)
		mp.AfterFlex = mp.Capacity
		switch {
		case mp.Gap == 0:
			mp.Verdict = "fits"
		default:
			f, cpuOnly, how := m.flex()
			after := map[string]float64{}
			for r, c := range mp.CapacityBy {
				after[r] = c
				if !cpuOnly || r == ResCPU {
					after[r] = c * f
				}
			}
			var still string
			still, mp.AfterFlex = binding(after)
			mp.ClosedBy = how
			if still != mp.Binding {
				mp.ClosedBy += "; then bound by " + still
			}
			mp.Uncovered = math.Max(0, mp.Demand-mp.AfterFlex)
			if mp.Uncovered == 0 {
				mp.Verdict = "gap closed by flex"
			} else {
				mp.Verdict = "UNCOVERED: add capacity or accept pool-1 backlog"
				mp.DeferredNote = fmt.Sprintf("pool 1 absorbs %.1f/s as backlog, drained after the peak", mp.Uncovered)
			}
		}
		p.Modules = append(p.Modules, mp)
	}
	sort.SliceStable(p.Modules, func(i, j int) bool { return p.Modules[i].Uncovered > p.Modules[j].Uncovered })
	if cfg.Central.Nodes > 0 {
		p.Central = checkCentral(p, cfg.Central, nodes, growth)
	}
	return p, nil
}

// binding returns the resource with the smallest capacity, CPU first on
// ties.
func binding(by map[string]float64) (string, float64) {
	best, c := "", math.Inf(1)
	for _, r := range []string{ResCPU, ResMemory, ResNetwork, ResDisk, ResFsyncs} {
		if v, ok := by[r]; ok && v < c {
			best, c = r, v
		}
	}
	if best == "" {
		return "", 0
	}
	return best, c
}

// totals sums the calibration cluster: in one process every role reports
// the process's CPU, RSS and disk, so those are taken once; network is
// counted per node and summed.
func totals(cpu map[string]float64, use map[string]*roleUse) *Totals {
	t := &Totals{}
	for role, u := range use {
		per := float64(max(u.nodes, 1))
		t.CPUCores = math.Max(t.CPUCores, cpu[role]/per)
		t.RSSMiB = math.Max(t.RSSMiB, u.rssBytes/per/(1<<20))
		t.DiskMBps = math.Max(t.DiskMBps, u.disk/per/1e6)
		t.FsyncsPerS = math.Max(t.FsyncsPerS, u.fsy/per)
		t.NetInMBps += u.netIn / 1e6
		t.NetOutMBps += u.netOut / 1e6
	}
	return t
}

// sameCPU reports whether every role's CPU is within 2% of the others'
// (nodes sharing one process report the process's CPU).
func sameCPU(cpu map[string]float64) bool {
	if len(cpu) < 2 {
		return false
	}
	lo, hi := math.Inf(1), 0.0
	for k, v := range cpu {
		if k == "timeline" { // one node where the others have two
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return hi > 0 && (hi-lo)/hi < 0.02
}

// WriteText writes the plan as a Markdown table.
func (p *Plan) WriteText(w io.Writer) {
	keys := make([]string, 0, len(p.Growth))
	for k := range p.Growth {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var g []string
	for _, k := range keys {
		g = append(g, fmt.Sprintf("%s x%g", k, p.Growth[k]))
	}
	fmt.Fprintf(w, "Capacity plan from %s, growth %s\n\n", p.Calibration, strings.Join(g, ", "))
	if p.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s.\n\n", p.Warning)
	}
	if p.Totals != nil {
		t := p.Totals
		fmt.Fprintf(w, "Totals (the only real figures of a one-process run): %.2f cores, %.0f MiB RSS, net in %.2f MB/s, out %.2f MB/s, disk %.2f MB/s, %.1f fsyncs/s.\n\n",
			t.CPUCores, t.RSSMiB, t.NetInMBps, t.NetOutMBps, t.DiskMBps, t.FsyncsPerS)
	}
	fmt.Fprintln(w, "| module | nodes | base/s | CPU ms/req | cores used | budget cores | RSS MiB | net in/out MB/s | disk MB/s | fsyncs/s | capacity/s by cpu/mem/net/disk/fsync | capacity/s | bound by | demand/s | growth ok | gap/s | after flex/s | uncovered/s | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range p.Modules {
		var by []string
		for _, r := range []string{ResCPU, ResMemory, ResNetwork, ResDisk, ResFsyncs} {
			if v, ok := m.CapacityBy[r]; ok {
				by = append(by, fmt.Sprintf("%.1f", v))
			} else {
				by = append(by, "-")
			}
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.2f | %.1f | %.0f | %.2f/%.2f | %.2f | %.1f | %s | %s | %s | %.1f | x%.1f | %.1f | %s | %.1f | %s |\n",
			m.Module, m.Nodes, m.BaseRate, m.CPUPerReq, m.CPUCores, m.BudgetCores, m.MemRSSMiB, m.NetInMBps, m.NetOutMBps, m.DiskMBps, m.FsyncsPerS,
			strings.Join(by, " / "), fmtRate(m.Capacity), m.Binding, m.Demand, m.Growth, m.Gap, fmtRate(m.AfterFlex), m.Uncovered, m.Verdict)
	}
	fmt.Fprintln(w)
	for _, m := range p.Modules {
		if m.ClosedBy != "" {
			fmt.Fprintf(w, "- %s: %s", m.Module, m.ClosedBy)
			if m.DeferredNote != "" {
				fmt.Fprintf(w, "; %s", m.DeferredNote)
			}
			fmt.Fprintln(w)
		}
	}
	if len(p.Central) > 0 {
		fmt.Fprintln(w, "\nCentral pieces (curves from BENCHMARKS.md, loadgen/curves.go):")
		for _, c := range p.Central {
			fmt.Fprintf(w, "- %s: %s\n", c.Piece, c.Figure)
			if c.Warning != "" {
				fmt.Fprintf(w, "  WARNING: %s\n", c.Warning)
			}
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "\nNote: %s.\n", n)
	}
}

func fmtRate(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}
