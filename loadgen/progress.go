package loadgen

import (
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"
)

// ProgressWidth is the most columns a progress line takes.
const ProgressWidth = 100

// kindProgress is the live state of one kind of request.
type kindProgress struct {
	// PerS is completions per second over the window (every outcome
	// except generator drops, which never started).
	PerS float64
	// OKPct is the share of completions in the window that succeeded;
	// downloads of variants not made yet are left out (NotReady).
	OKPct float64
	// P99 is over the window's completed requests (succeeded or failed),
	// by completion time; Samples is how many there were.
	P99     time.Duration
	Samples int
	// NotReady counts downloads in the window whose variant was not made.
	NotReady int
	// InFlight is requests started and not answered yet.
	InFlight int64
}

// progressOf computes the figures of kind over the completions in
// (now-window, now]. records are in completion order (appended as they
// complete), so the scan stops at the first one older than the window.
func progressOf(records []record, kind string, now, window time.Duration, inFlight int64) kindProgress {
	var p kindProgress
	p.InFlight = inFlight
	from := now - window
	var lat []time.Duration
	done, ok, counted := 0, 0, 0
	for j := len(records) - 1; j >= 0; j-- {
		rec := records[j]
		if rec.done <= from-time.Second { // allow for completion-order races
			break
		}
		if rec.done <= from || rec.done > now || rec.kind != kind || rec.outcome == dropped {
			continue
		}
		done++
		switch rec.outcome {
		case okOutcome:
			ok++
			counted++
			lat = append(lat, rec.latency)
		case failed:
			counted++
			lat = append(lat, rec.latency)
		case notReady:
			p.NotReady++
		case rejected, canceled:
			counted++
		}
	}
	span := min(window, now)
	if span > 0 {
		p.PerS = float64(done) / span.Seconds()
	}
	p.OKPct = 100
	if counted > 0 {
		p.OKPct = 100 * float64(ok) / float64(counted)
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	p.Samples = len(lat)
	if len(lat) > 0 {
		p.P99 = lat[rank(len(lat), 0.99)]
	}
	return p
}

// rank is the nearest-rank index of percentile q among n sorted values:
// the smallest value with at least q of the values at or below it. For
// fewer than 100 values the p99 is the largest.
func rank(n int, q float64) int {
	i := int(math.Ceil(q*float64(n))) - 1
	return max(0, min(n-1, i))
}

// fmtLatency prints a latency in at most 6 columns.
func fmtLatency(d time.Duration, samples int) string {
	switch {
	case samples == 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 100*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return fmt.Sprintf("%.0fs", d.Seconds())
	}
}

// progressLine renders one progress line of at most ProgressWidth columns.
func progressLine(phase, phases int, name string, elapsed time.Duration, up, down kindProgress, g Second) string {
	line := fmt.Sprintf("%d/%d %-7.7s %3ds | up %.1f/s %.0f%% p99 %s fl %d | dn %.1f/s %.0f%% fl %d | %s pools %d/%d held %d",
		phase, phases, name, int(elapsed.Seconds()),
		up.PerS, up.OKPct, fmtLatency(up.P99, up.Samples), up.InFlight,
		down.PerS, down.OKPct, down.InFlight,
		g.Level, g.Pool1Items, g.Pool2Items, g.HeldItems)
	return truncate(line, ProgressWidth)
}

func truncate(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// progressHeader explains the line's figures once, at the start.
func progressHeader() string {
	return fmt.Sprintf("progress: completions/s, ok%% and p99 over the last %s of completions; fl = in flight", ProgressWindow)
}

// progress prints the progress line: redrawn in place every second on a
// terminal, a plain line every ProgressEvery otherwise.
func (r *runner) progress(g Second) {
	elapsed := time.Since(r.start)
	if !r.cfg.TTY {
		if !r.lastPlain.IsZero() && elapsed-r.lastPlain.Sub(r.start) < r.cfg.ProgressEvery-sampleEvery/2 {
			return
		}
		if r.lastPlain.IsZero() {
			fmt.Fprintln(r.cfg.Progress, progressHeader())
		}
		r.lastPlain = time.Now()
	}
	i, ph, _ := r.phaseAt(elapsed)
	r.mu.Lock()
	up := progressOf(r.records, kindUpload, elapsed, ProgressWindow, r.upFlight.Load())
	down := progressOf(r.records, kindDownload, elapsed, ProgressWindow, r.downFlight.Load())
	r.mu.Unlock()
	line := progressLine(i+1, len(r.cfg.Profile.Phases), ph.Name, elapsed, up, down, g)
	if r.cfg.TTY {
		fmt.Fprintf(r.cfg.Progress, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(r.cfg.Progress, line)
}

func (r *runner) progressDone() {
	if r.cfg.TTY {
		fmt.Fprintln(r.cfg.Progress)
	}
}
