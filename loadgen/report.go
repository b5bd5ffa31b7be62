package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is the result of one run.
type Report struct {
	Profile  string    `json:"profile"`
	Mode     string    `json:"mode"`
	Started  time.Time `json:"started"`
	Seconds  []Second  `json:"seconds"`
	Phases   []Summary `json:"phases"`
	Totals   Summary   `json:"totals"`
	Events   []Event   `json:"events"`
	Duration float64   `json:"duration_s"`
	// Cancelled says the run was cut short: its requests in flight were
	// cancelled and nothing was verified (Lost and Pending are not known).
	Cancelled bool `json:"cancelled,omitempty"`
	// Variants is the acknowledged uploads' variant-ready latency,
	// measured until VerifyTimeout after the run's verification began
	// (variants.go).
	Variants VariantStats `json:"variants"`
}

// maxErrorsPerSecond caps Second.Errors.
const maxErrorsPerSecond = 3

// Second is what happened in one second of the run.
type Second struct {
	T int `json:"t"`
	// Sampled says the cluster gauges below were observed in this
	// second; a second without is a gap in the gauge charts, not a zero.
	Sampled     bool           `json:"sampled"`
	Phase       string         `json:"phase"`
	Level       string         `json:"level"`
	FlexVersion int64          `json:"flex_version"`
	Upload      KindStats      `json:"upload"`
	Download    KindStats      `json:"download"`
	Rejections  map[string]int `json:"rejections,omitempty"` // "reason/business"
	// Errors are the first few failed or rejected requests that arrived
	// in this second, as "kind: status line" (at most maxErrorsPerSecond).
	Errors      []string           `json:"errors,omitempty"`
	Pool1Items  int64              `json:"pool1_items"`
	Pool1Bytes  int64              `json:"pool1_bytes"`
	Pool2Items  int64              `json:"pool2_items"`
	Pool2Bytes  int64              `json:"pool2_bytes"`
	HeldItems   int64              `json:"held_items"`
	CPU         map[string]float64 `json:"cpu_cores,omitempty"` // by role
	MemRSSBytes float64            `json:"mem_rss_bytes,omitempty"`
	InFlight    map[string]float64 `json:"in_flight,omitempty"` // by role
	Nodes       map[string]int     `json:"nodes,omitempty"`     // healthy nodes by role
	// Resources are each role's RSS, network and disk use, from the
	// resource counters in the nodes' heartbeats.
	Resources map[string]RoleResources `json:"resources,omitempty"`
	// UploadDone and DownloadDone are by completion time (Upload and
	// Download above are by arrival second).
	UploadDone   DoneStats `json:"upload_done"`
	DownloadDone DoneStats `json:"download_done"`
	// AutoSignals are the auto-flex signals the master read at this
	// second (GetFlexAuto), in an auto-flex run (Mode "auto-flex").
	AutoSignals map[string]float64 `json:"auto_signals,omitempty"`
}

// DoneStats is one second by completion time: the requests answered in it,
// and latency over the completions of the ProgressWindow ending with it.
type DoneStats struct {
	Completed int `json:"completed"`
	Succeeded int `json:"succeeded"`
	// WindowSamples counts the answered requests (succeeded or failed) in
	// the window; with none, P50Ms and P99Ms mean nothing (a gap).
	WindowSamples int     `json:"window_samples"`
	P50Ms         float64 `json:"window_p50_ms"`
	P99Ms         float64 `json:"window_p99_ms"`
}

// KindStats counts one kind of request (per second or per phase).
type KindStats struct {
	Offered   int `json:"offered"`
	Admitted  int `json:"admitted"`
	Succeeded int `json:"succeeded"`
	Rejected  int `json:"rejected"`
	Failed    int `json:"failed"`
	NotReady  int `json:"not_ready"`
	Dropped   int `json:"dropped_by_generator"`
	// Canceled counts requests cut short because the run was cancelled.
	Canceled int     `json:"canceled,omitempty"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	Bytes    int64   `json:"bytes"`
}

// Summary sums a phase or the whole run.
type Summary struct {
	Name       string         `json:"name"`
	Seconds    float64        `json:"seconds"`
	Upload     KindStats      `json:"upload"`
	Download   KindStats      `json:"download"`
	Rejections map[string]int `json:"rejections,omitempty"`
	// GoodputPerS is succeeded uploads plus downloads per second.
	GoodputPerS float64 `json:"goodput_per_s"`
	// CPU is the mean cores used by each role.
	CPU map[string]float64 `json:"cpu_cores,omitempty"`
	// Lost counts acknowledged uploads not downloadable with their
	// SHA-256 at the end (totals only; must be 0). Pending counts those
	// still held in buffer pool 1.
	Lost    int `json:"lost"`
	Pending int `json:"pending"`
}

// Event is a flex change made during the run.
type Event struct {
	At      float64           `json:"at_s"`
	Kind    string            `json:"kind"`
	Level   string            `json:"level,omitempty"`
	Knobs   map[string]string `json:"knobs,omitempty"`
	Version int64             `json:"version,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// Label is a short text for chart markers.
func (e Event) Label() string {
	if e.Level != "" {
		return e.Level
	}
	var parts []string
	for k, v := range e.Knobs {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// percentile is the nearest-rank percentile p of sorted, in ms. (The
// interpolating index int(p*(n-1)) it replaced made a second's "p99" its
// second-largest value whenever it had fewer than 101 samples.)
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[rank(len(sorted), p)]) / float64(time.Millisecond)
}

// tally accumulates records into KindStats.
type tally struct {
	stats KindStats
	lat   []time.Duration
}

func (t *tally) add(rec record) {
	t.stats.Offered++
	switch rec.outcome {
	case okOutcome:
		t.stats.Succeeded++
		t.stats.Bytes += rec.bytes
		t.lat = append(t.lat, rec.latency)
	case rejected:
		t.stats.Rejected++
	case failed:
		t.stats.Failed++
		t.lat = append(t.lat, rec.latency)
	case notReady:
		t.stats.NotReady++
	case dropped:
		t.stats.Dropped++
	case canceled:
		t.stats.Canceled++
	}
}

func (t *tally) done() KindStats {
	sort.Slice(t.lat, func(i, j int) bool { return t.lat[i] < t.lat[j] })
	s := t.stats
	s.Admitted = s.Offered - s.Rejected - s.Dropped - s.Canceled
	s.P50Ms, s.P99Ms = percentile(t.lat, 0.5), percentile(t.lat, 0.99)
	return s
}

// report aggregates the run's records.
func (r *runner) report() *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	dur := time.Since(r.start)
	n := int(dur/time.Second) + 1
	up, down := make([]tally, n), make([]tally, n)
	rej := make([]map[string]int, n)
	errs := make([][]string, n)
	phaseOf := func(sec int) int { i, _, _ := r.phaseAt(time.Duration(sec) * time.Second); return i }
	nph := len(r.cfg.Profile.Phases)
	pUp, pDown := make([]tally, nph), make([]tally, nph)
	pRej := make([]map[string]int, nph)
	var tUp, tDown tally
	tRej := map[string]int{}
	for _, rec := range r.records {
		if rec.sec >= n {
			rec.sec = n - 1
		}
		if rec.err != "" && len(errs[rec.sec]) < maxErrorsPerSecond {
			errs[rec.sec] = append(errs[rec.sec], rec.kind+": "+rec.err)
		}
		ph := phaseOf(rec.sec)
		if rec.kind == "upload" {
			up[rec.sec].add(rec)
			pUp[ph].add(rec)
			tUp.add(rec)
		} else {
			down[rec.sec].add(rec)
			pDown[ph].add(rec)
			tDown.add(rec)
		}
		if rec.outcome == rejected || rec.outcome == dropped {
			key := rec.reason + "/" + rec.business
			if rec.business == "" {
				key = rec.reason + "/" + rec.kind
			}
			if rej[rec.sec] == nil {
				rej[rec.sec] = map[string]int{}
			}
			if pRej[ph] == nil {
				pRej[ph] = map[string]int{}
			}
			rej[rec.sec][key]++
			pRej[ph][key]++
			tRej[key]++
		}
	}
	rep := &Report{Profile: r.cfg.Profile.Name, Mode: r.cfg.Mode, Started: r.start, Events: r.events, Duration: dur.Seconds()}
	gaugeAt := map[int]Second{}
	for _, g := range r.gauges {
		gaugeAt[g.T] = g
	}
	level := "normal"
	for s := 0; s < n; s++ {
		g, ok := gaugeAt[s]
		if !ok {
			g = Second{T: s, Level: level}
		}
		level = g.Level
		g.Phase = r.cfg.Profile.Phases[phaseOf(s)].Name
		g.Upload, g.Download, g.Rejections, g.Errors = up[s].done(), down[s].done(), rej[s], errs[s]
		rep.Seconds = append(rep.Seconds, g)
	}
	byCompletion(rep.Seconds, r.records, kindUpload, func(s *Second) *DoneStats { return &s.UploadDone })
	byCompletion(rep.Seconds, r.records, kindDownload, func(s *Second) *DoneStats { return &s.DownloadDone })
	cpuMean := func(from, to int) map[string]float64 {
		sum, cnt := map[string]float64{}, 0
		for _, g := range r.gauges {
			if g.T >= from && g.T < to && len(g.CPU) > 0 {
				cnt++
				for k, v := range g.CPU {
					sum[k] += v
				}
			}
		}
		for k := range sum {
			sum[k] /= float64(cnt)
		}
		return sum
	}
	var t0 time.Duration
	for i, ph := range r.cfg.Profile.Phases {
		d := ph.Duration.D()
		if t0+d > dur {
			d = dur - t0
		}
		s := Summary{Name: ph.Name, Seconds: d.Seconds(), Upload: pUp[i].done(), Download: pDown[i].done(), Rejections: pRej[i],
			CPU: cpuMean(int(t0/time.Second), int((t0+d)/time.Second))}
		if d > 0 {
			s.GoodputPerS = float64(s.Upload.Succeeded+s.Download.Succeeded) / d.Seconds()
		}
		rep.Phases = append(rep.Phases, s)
		t0 += ph.Duration.D()
	}
	rep.Totals = Summary{Name: "total", Seconds: dur.Seconds(), Upload: tUp.done(), Download: tDown.done(), Rejections: tRej, CPU: cpuMean(0, n)}
	rep.Totals.GoodputPerS = float64(rep.Totals.Upload.Succeeded+rep.Totals.Download.Succeeded) / dur.Seconds()
	return rep
}

// byCompletion fills each second's DoneStats of kind: completions in the
// second, and p50/p99 over the answered requests of the ProgressWindow
// ending with it, by completion time. A slow request is counted when it
// answers, so a 24 s upload shows 24 s after it arrived, not at arrival.
func byCompletion(secs []Second, records []record, kind string, at func(*Second) *DoneStats) {
	type c struct {
		done time.Duration
		lat  time.Duration
	}
	var answered []c
	for _, rec := range records {
		if rec.kind != kind || rec.outcome == dropped {
			continue
		}
		i := min(int(rec.done/time.Second), len(secs)-1)
		d := at(&secs[i])
		d.Completed++
		if rec.outcome == okOutcome {
			d.Succeeded++
		}
		if rec.outcome == okOutcome || rec.outcome == failed {
			answered = append(answered, c{rec.done, rec.latency})
		}
	}
	sort.Slice(answered, func(i, j int) bool { return answered[i].done < answered[j].done })
	lo, hi := 0, 0
	for s := range secs {
		end := time.Duration(s+1) * time.Second
		for hi < len(answered) && answered[hi].done < end {
			hi++
		}
		for lo < hi && answered[lo].done < end-ProgressWindow {
			lo++
		}
		lat := make([]time.Duration, 0, hi-lo)
		for _, a := range answered[lo:hi] {
			lat = append(lat, a.lat)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		d := at(&secs[s])
		d.WindowSamples = len(lat)
		d.P50Ms, d.P99Ms = percentile(lat, 0.5), percentile(lat, 0.99)
	}
}

// Write writes report.json, report.md and the charts into dir.
func (rep *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	charts, err := rep.writeCharts(dir, "")
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	rep.markdown(f, charts)
	return f.Close()
}

func (rep *Report) markdown(w io.Writer, charts []string) {
	fmt.Fprintf(w, "# Load report: %s (%s)\n\nStarted %s, ran %.0f s.\n\n", rep.Profile, rep.Mode, rep.Started.UTC().Format(time.RFC3339), rep.Duration)
	fmt.Fprintf(w, "**Lost acknowledged uploads: %d** (pending in pool 1 at the end: %d)\n\n", rep.Totals.Lost, rep.Totals.Pending)
	v := rep.Variants
	fmt.Fprintf(w, "Variant-ready latency (acknowledgement to a variant downloadable, over %d acknowledged uploads, %d of them acknowledged processing and polled): p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d not ready at the end.\n\n",
		v.Acked, v.Processing, v.P50Ms, v.P99Ms, v.MaxMs, v.NotReady)
	if peaks := rep.autoSignalPeaks(); len(peaks) > 0 {
		fmt.Fprintf(w, "Auto-flex signals the master read, the highest of each (at the run's second): %s.\n\n", strings.Join(peaks, ", "))
	}
	fmt.Fprintln(w, "| phase | s | upload offered/s | admitted | ok | rejected | failed | p99 ms | download offered/s | ok | p99 ms | goodput/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range append(append([]Summary(nil), rep.Phases...), rep.Totals) {
		per := func(n int) float64 {
			if s.Seconds <= 0 {
				return 0
			}
			return float64(n) / s.Seconds
		}
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %d | %d | %d | %d | %.0f | %.1f | %d | %.0f | %.1f |\n",
			s.Name, s.Seconds, per(s.Upload.Offered), s.Upload.Admitted, s.Upload.Succeeded, s.Upload.Rejected, s.Upload.Failed, s.Upload.P99Ms,
			per(s.Download.Offered), s.Download.Succeeded, s.Download.P99Ms, s.GoodputPerS)
	}
	if len(rep.Totals.Rejections) > 0 {
		fmt.Fprintln(w, "\n## Rejections by reason and business\n\n| reason/business | count |\n|---|---|")
		keys := make([]string, 0, len(rep.Totals.Rejections))
		for k := range rep.Totals.Rejections {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "| %s | %d |\n", k, rep.Totals.Rejections[k])
		}
	}
	if len(rep.Events) > 0 {
		fmt.Fprintln(w, "\n## Flex changes\n\n| at s | change | version | error |\n|---|---|---|---|")
		for _, e := range rep.Events {
			fmt.Fprintf(w, "| %.0f | %s | %d | %s |\n", e.At, e.Label(), e.Version, e.Error)
		}
	}
	fmt.Fprintln(w, "\n## Charts")
	for _, c := range charts {
		fmt.Fprintf(w, "\n![%s](%s)\n", c, c)
	}
}

// autoSignalPeaks lists each auto-flex signal's highest value in the run
// and its second, by signal name: "compress_cpu_forecast_normal 0.45
// (0:23)". Empty when no second has signals.
func (rep *Report) autoSignalPeaks() []string {
	type peak struct {
		v float64
		t int
	}
	peaks := map[string]peak{}
	for _, g := range rep.Seconds {
		for k, v := range g.AutoSignals {
			if p, ok := peaks[k]; !ok || v > p.v {
				peaks[k] = peak{v, g.T}
			}
		}
	}
	names := make([]string, 0, len(peaks))
	for k := range peaks {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, k := range names {
		p := peaks[k]
		out[i] = fmt.Sprintf("%s %s (%d:%02d)", k, strconv.FormatFloat(p.v, 'g', 3, 64), p.t/60, p.t%60)
	}
	return out
}
