package loadgen

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// flexOffLike builds a report as a flex-off peak produces it: 4 uploads a
// second whose latency climbs to 24 s, downloads answered in ms, and the
// observer missing seconds 10-12.
func flexOffLike(t *testing.T, mode string, peak time.Duration) *Report {
	t.Helper()
	prof, err := ParseProfile([]byte("name: p\nphoto_dir: x\nphases:\n  - {name: peak, duration: 40s, upload_rate: 4, download_rate: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: RunConfig{Profile: prof, Mode: mode}, start: time.Now().Add(-60 * time.Second)}
	for sec := 0; sec < 30; sec++ {
		for k := 0; k < 4; k++ {
			lat := time.Duration(float64(peak) * float64(sec) / 29 * float64(k+1) / 4)
			arr := time.Duration(sec)*time.Second + time.Duration(k)*250*time.Millisecond
			r.records = append(r.records, record{sec: sec, done: arr + lat, kind: kindUpload, outcome: okOutcome, latency: lat})
		}
		for k := 0; k < 10; k++ {
			arr := time.Duration(sec)*time.Second + time.Duration(k)*100*time.Millisecond
			r.records = append(r.records, record{sec: sec, done: arr + 30*time.Millisecond, kind: kindDownload, outcome: okOutcome, latency: 30 * time.Millisecond})
		}
		if sec < 10 || sec > 12 {
			r.gauges = append(r.gauges, Second{T: sec, Sampled: true, Level: "normal", Pool1Items: int64(sec)})
		}
	}
	return r.report()
}

func panelOf(t *testing.T, rep *Report, file string) panel {
	t.Helper()
	for _, c := range rep.panels() {
		if c.file == file {
			return c.p
		}
	}
	t.Fatalf("no chart %s", file)
	return panel{}
}

func seriesOf(t *testing.T, p panel, name string) series {
	t.Helper()
	for _, s := range p.ss {
		if strings.HasPrefix(s.name, name) {
			return s
		}
	}
	t.Fatalf("%s: no series %s", p.title, name)
	return series{}
}

func maxOf(vs []float64) float64 {
	m := math.Inf(-1)
	for _, v := range vs {
		if usable(v) {
			m = math.Max(m, v)
		}
	}
	return m
}

// The slowest uploads (24 s) must reach the latency chart: by completion
// time, with a nearest-rank p99, on a log axis that also shows 30 ms
// downloads. Arrival-second buckets of four samples and the interpolated
// index int(0.99*(n-1)) plotted each second's second-largest value.
func TestLatencyChartShowsTheSlowestUploads(t *testing.T) {
	rep := flexOffLike(t, "flex-off", 24*time.Second)
	lat := panelOf(t, rep, "latency.svg")
	if !lat.log {
		t.Fatal("latency chart is not on a log axis")
	}
	if got := maxOf(seriesOf(t, lat, "upload p99").values); got != 24000 {
		t.Errorf("upload p99 peaks at %.0f ms on the chart, want 24000", got)
	}
	// The 24 s answers complete at 29 s + 24 s, after the last arrival:
	// the chart runs on to show them.
	if n := len(rep.Seconds); n < 53 {
		t.Errorf("chart covers %d s, want the completions up to 53 s", n)
	}
	if got := maxOf(seriesOf(t, lat, "download p99").values); got != 30 {
		t.Errorf("download p99 %.0f ms, want 30", got)
	}
	svg := lineChart(lat)
	for _, tick := range []string{">10<", ">100k<", "log scale"} {
		if !strings.Contains(svg, tick) {
			t.Errorf("latency chart lacks %q (log axis from 10 ms to 100 s)", tick)
		}
	}
}

func TestGaugeGapsAreGapsNotZeros(t *testing.T) {
	rep := flexOffLike(t, "flex-off", 24*time.Second)
	pools := panelOf(t, rep, "pools.svg")
	p1 := seriesOf(t, pools, "pool 1").values
	for s := 10; s <= 12; s++ {
		if !math.IsNaN(p1[s]) {
			t.Errorf("unsampled second %d is %v, want a gap", s, p1[s])
		}
	}
	if p1[9] != 9 || p1[13] != 13 {
		t.Errorf("sampled seconds %v %v", p1[9], p1[13])
	}
	// The line breaks at the gap: two polylines for pool 1 (0-9, 13-29)
	// and none of its points at y = 0 in the gap.
	svg := lineChart(pools)
	if n := strings.Count(svg, `stroke="`+palette[0]+`" stroke-width`); n < 2 {
		t.Errorf("pool 1 drawn as %d polylines, want the gap to break it", n)
	}
	// Latency: seconds whose window holds no answer are gaps too.
	lat := seriesOf(t, panelOf(t, rep, "latency.svg"), "upload p99").values
	if last := lat[len(lat)-1]; !math.IsNaN(last) && rep.Seconds[len(lat)-1].UploadDone.WindowSamples == 0 {
		t.Errorf("empty window drawn as %v", last)
	}
}

func TestIdenticalSeriesStayDistinguishable(t *testing.T) {
	rep := flexOffLike(t, "flex-off", time.Second)
	for _, file := range []string{"uploads.svg", "downloads.svg"} {
		p := panelOf(t, rep, file)
		seen := map[string]bool{}
		for _, s := range p.ss {
			key := s.dash + "/" + strings.TrimRight(strings.TrimRight(fmtNum(s.width), "0"), ".")
			if seen[key] {
				t.Errorf("%s: series %s has the same style %q as another", file, s.name, key)
			}
			seen[key] = true
		}
		// Nothing was rejected: offered and admitted are the same line,
		// and both must still show in the SVG (wide pale under dashed).
		svg := lineChart(p)
		if !strings.Contains(svg, `stroke-dasharray="8 4"`) || !strings.Contains(svg, `stroke-opacity="0.45"`) {
			t.Errorf("%s: overlapping series are not styled apart", file)
		}
		if !strings.Contains(p.title, "5 s moving average") {
			t.Errorf("%s: title %q does not state the smoothing window", file, p.title)
		}
	}
}

func TestSmoothIsTrailingMeanOverGaps(t *testing.T) {
	got := smooth([]float64{0, 0, 0, 0, 10, math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), 4})
	if got[4] != 2 || got[5] != 2.5 || !math.IsNaN(got[9]) || got[10] != 4 {
		t.Errorf("smooth = %v", got)
	}
}

func TestCompareChartSideBySide(t *testing.T) {
	c := Comparison{Off: flexOffLike(t, "flex-off", 24*time.Second), On: flexOffLike(t, "flex-on", 80*time.Millisecond)}
	dir := t.TempDir()
	if err := WriteComparison(dir, c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "compare.svg"))
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{`width="1800"`, "Goodput", "Upload p99", "goodput (flex-off)", "goodput (flex-on)", "upload p99 (flex-off)", "upload p99 (flex-on)", "log scale"} {
		if !strings.Contains(svg, want) {
			t.Errorf("compare.svg lacks %q", want)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "![compare.svg](compare.svg)") {
		t.Error("report.md does not show compare.svg")
	}
}
