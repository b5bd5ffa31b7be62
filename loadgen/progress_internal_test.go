package loadgen

import (
	"testing"
	"time"
)

func TestProgressOfIsByCompletionTime(t *testing.T) {
	s := time.Second
	recs := []record{
		// Arrived at 0 s, answered 24 s later: the window ending at 25 s
		// must see it although it arrived long before.
		{sec: 0, done: 24 * s, kind: kindUpload, outcome: okOutcome, latency: 24 * s},
		{sec: 20, done: 21 * s, kind: kindUpload, outcome: okOutcome, latency: s},
		{sec: 20, done: 22 * s, kind: kindUpload, outcome: rejected},
		{sec: 22, done: 22 * s, kind: kindUpload, outcome: dropped},
		{sec: 23, done: 23 * s, kind: kindDownload, outcome: notReady},
		{sec: 23, done: 24 * s, kind: kindDownload, outcome: okOutcome, latency: 40 * time.Millisecond},
	}
	up := progressOf(recs, kindUpload, 25*s, 10*s, 3)
	if up.PerS != 0.3 || up.P99 != 24*s || up.Samples != 2 || up.InFlight != 3 {
		t.Errorf("upload progress %+v: want 3 completions in 10 s, p99 24 s over 2 answers, 3 in flight", up)
	}
	if want := 100 * 2.0 / 3; up.OKPct != want {
		t.Errorf("upload ok %.1f%%, want %.1f%%", up.OKPct, want)
	}
	down := progressOf(recs, kindDownload, 25*s, 10*s, 0)
	if down.NotReady != 1 || down.OKPct != 100 || down.P99 != 40*time.Millisecond {
		t.Errorf("download progress %+v", down)
	}
	// Out of the window: nothing, and no p99 to show.
	late := progressOf(recs, kindUpload, 40*s, 10*s, 0)
	if late.PerS != 0 || late.Samples != 0 || fmtLatency(late.P99, late.Samples) != "-" {
		t.Errorf("after the window: %+v", late)
	}
}

func TestRankIsNearestRank(t *testing.T) {
	for _, c := range []struct{ n, want int }{{1, 0}, {4, 3}, {50, 49}, {100, 98}, {1000, 989}} {
		if got := rank(c.n, 0.99); got != c.want {
			t.Errorf("rank(%d, 0.99) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestProgressLineFitsBusyRun(t *testing.T) {
	busy := kindProgress{PerS: 1234.5, OKPct: 99.5, P99: 123 * time.Second, Samples: 10, InFlight: 256}
	g := Second{Level: "yellow", Pool1Items: 123456, Pool2Items: 98765, HeldItems: 1234567}
	line := progressLine(10, 12, "midnight-peak", 12345*time.Second, busy, busy, g)
	if n := len([]rune(line)); n > ProgressWidth {
		t.Errorf("line is %d columns: %q", n, line)
	}
	calm := progressLine(1, 3, "ramp", 5*time.Second, kindProgress{PerS: 4.5, OKPct: 100, P99: 24100 * time.Millisecond, Samples: 9, InFlight: 37},
		kindProgress{PerS: 10, OKPct: 98, InFlight: 2}, Second{Level: "blue", Pool1Items: 3})
	if len(calm) > ProgressWidth || calm != "1/3 ramp      5s | up 4.5/s 100% p99 24.1s fl 37 | dn 10.0/s 98% fl 2 | blue pools 3/0 held 0" {
		t.Errorf("line %q", calm)
	}
}
