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
	// TimelineDelay is the ratio of held notifications the red level sets;
	// default 0.7. Held notifications stop the downloads they would cause.
	TimelineDelay float64
	// LowPriorityShare is the share of uploads from businesses the red
	// level sheds; default from the calibration's business mix, else 0.1.
	LowPriorityShare float64
}

// ModulePlan is the plan for one module.
type ModulePlan struct {
	Module       string  `json:"module"`
	Driver       string  `json:"driver"` // uploads | downloads
	BaseRate     float64 `json:"base_rate_per_s"`
	CPUPerReq    float64 `json:"cpu_ms_per_request"`
	CPUCores     float64 `json:"cpu_cores_at_base"`
	BudgetCores  float64 `json:"budget_cores"`
	MemRSSMiB    float64 `json:"mem_rss_mib"`
	NetMBps      float64 `json:"net_mb_per_s_at_base"`
	Capacity     float64 `json:"capacity_per_s"`
	Demand       float64 `json:"demand_per_s"`
	Growth       float64 `json:"growth_it_can_take"`
	Gap          float64 `json:"gap_per_s"`
	ClosedBy     string  `json:"closed_by"`
	AfterFlex    float64 `json:"capacity_after_flex_per_s"`
	Uncovered    float64 `json:"uncovered_per_s"`
	Verdict      string  `json:"verdict"`
	DeferredNote string  `json:"note,omitempty"`
}

// Plan is the pre-holiday capacity review.
type Plan struct {
	Calibration string             `json:"calibration"`
	Growth      map[string]float64 `json:"growth"`
	Modules     []ModulePlan       `json:"modules"`
	// Warning says when the figures cannot be trusted per module.
	Warning string `json:"warning,omitempty"`
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

// MakePlan computes the capacity plan from a calibration run. A module's
// capacity is its budgeted CPU divided by its measured CPU per request.
func MakePlan(cal *Report, cfg PlanConfig) (*Plan, error) {
	if cfg.JPEGCPURatio <= 0 {
		cfg.JPEGCPURatio = 0.2
	}
	if cfg.TimelineDelay <= 0 {
		cfg.TimelineDelay = 0.7
	}
	if cfg.LowPriorityShare <= 0 {
		cfg.LowPriorityShare = 0.1
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
	}
	if n == 0 {
		return nil, fmt.Errorf("calibration has no second with a success")
	}
	upRate, downRate, upBytes, downBytes = upRate/n, downRate/n, upBytes/n, downBytes/n
	for k := range cpu {
		cpu[k] /= n
	}
	p := &Plan{Calibration: cal.Profile + " (" + cal.Mode + ")", Growth: cfg.Growth}
	if sameCPU(cpu) {
		p.Warning = "every role reported the same CPU: the calibration ran all services in one process (willow up / --embedded), " +
			"so per-module CPU is the whole process's; calibrate on deploy/local or a real cluster for per-module figures"
	}
	type mod struct {
		name, driver string
		rate, net    float64
		flex         func(capacity float64) (float64, string)
	}
	mods := []mod{
		{"upload", "uploads", upRate, upBytes / 1e6, func(c float64) (float64, string) {
			f := 1 / (1 - cfg.LowPriorityShare)
			return c * f, fmt.Sprintf("retries=off, coarse shed of low-priority businesses (%.0f%% of uploads), overflow to pool1", cfg.LowPriorityShare*100)
		}},
		{"compress", "uploads", upRate, upBytes / 1e6, func(c float64) (float64, string) {
			return c / cfg.JPEGCPURatio, fmt.Sprintf("image_codec=jpeg q50 (compress CPU x%.2f), video_bitrate_kbps=1200 armed hours ahead; pool1 defers the rest", cfg.JPEGCPURatio)
		}},
		{"edgecache", "downloads", downRate, downBytes / 1e6, func(c float64) (float64, string) {
			return c / (1 - cfg.TimelineDelay), fmt.Sprintf("timeline_delay_ratio=%.1f (held notifications trigger no downloads), shed_ratio.prefetch", cfg.TimelineDelay)
		}},
		{"timeline", "uploads", upRate, 0, func(c float64) (float64, string) {
			return c / (1 - cfg.TimelineDelay), fmt.Sprintf("timeline_delay_ratio=%.1f, release capped by timeline_release_per_s", cfg.TimelineDelay)
		}},
	}
	for _, m := range mods {
		mp := ModulePlan{Module: m.name, Driver: m.driver, BaseRate: m.rate, CPUCores: cpu[m.name], MemRSSMiB: rss / (1 << 20), NetMBps: m.net}
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
		mp.Capacity = cores / (mp.CPUPerReq / 1000)
		if m.rate > 0 {
			mp.Growth = mp.Capacity / m.rate
		}
		mp.Gap = math.Max(0, mp.Demand-mp.Capacity)
		mp.AfterFlex = mp.Capacity
		switch {
		case mp.Gap == 0:
			mp.Verdict = "fits"
		default:
			mp.AfterFlex, mp.ClosedBy = m.flex(mp.Capacity)
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
	return p, nil
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
	fmt.Fprintln(w, "| module | base/s | CPU ms/req | cores used | budget cores | RSS MiB | net MB/s | capacity/s | demand/s | growth ok | gap/s | after flex/s | uncovered/s | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range p.Modules {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.2f | %.1f | %.0f | %.2f | %s | %.1f | x%.1f | %.1f | %s | %.1f | %s |\n",
			m.Module, m.BaseRate, m.CPUPerReq, m.CPUCores, m.BudgetCores, m.MemRSSMiB, m.NetMBps, fmtRate(m.Capacity), m.Demand, m.Growth, m.Gap, fmtRate(m.AfterFlex), m.Uncovered, m.Verdict)
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
}

func fmtRate(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}
