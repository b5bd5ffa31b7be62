package loadgen

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SmoothWindow is the moving-average window of the rate charts, in
// seconds: a rate at t is the mean of the seconds (t-SmoothWindow, t].
const SmoothWindow = 5

// series is one line of a chart. NaN values are gaps: the line breaks
// there instead of dropping to zero.
type series struct {
	name   string
	values []float64
	// style tells identical series apart: a wide pale line under a dashed
	// one under a dotted one stays readable where they overlap.
	dash    string
	width   float64
	opacity float64
}

// marker is a vertical line at x with a label (a flex change).
type marker struct {
	x     float64
	label string
}

// panel is one chart: a title, a y axis, its series and markers.
type panel struct {
	title, yLabel string
	ss            []series
	markers       []marker
	// log draws the y axis in powers of ten (latency: downloads in ms and
	// uploads in seconds share no linear axis).
	log bool
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// styles are the line styles given to a chart's series in turn.
var styles = []struct {
	dash           string
	width, opacity float64
}{{"", 5, 0.45}, {"8 4", 2.2, 1}, {"2 3", 2.2, 1}, {"", 1.5, 1}, {"12 3 3 3", 1.8, 1}}

func styled(ss ...series) []series {
	for i := range ss {
		st := styles[i%len(styles)]
		ss[i].dash, ss[i].width, ss[i].opacity = st.dash, st.width, st.opacity
	}
	return ss
}

func usable(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// lineChart renders one panel as an SVG document.
func lineChart(p panel) string { return chartSVG([]panel{p}) }

// chartSVG renders panels side by side in one SVG document.
func chartSVG(ps []panel) string {
	const pw, h = 900.0, 360.0
	var b strings.Builder
	w := pw * float64(len(ps))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range ps {
		drawPanel(&b, p, float64(i)*pw, pw, h)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func drawPanel(b *strings.Builder, p panel, x0, w, h float64) {
	const left, right, top, bottom = 70.0, 180.0, 40.0, 50.0
	n := 0
	lo, hi := math.Inf(1), 0.0
	for _, s := range p.ss {
		n = max(n, len(s.values))
		for _, v := range s.values {
			if !usable(v) || (p.log && v <= 0) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	n = max(n, 2)
	pw, ph := w-left-right, h-top-bottom
	x := func(i float64) float64 { return x0 + left + pw*i/float64(n-1) }
	var y func(v float64) float64
	var ticks []float64
	if p.log {
		if hi == 0 {
			lo, hi = 1, 10
		}
		d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if d1 <= d0 {
			d1 = d0 + 1
		}
		y = func(v float64) float64 { return top + ph*(1-(math.Log10(v)-d0)/(d1-d0)) }
		for d := d0; d <= d1; d++ {
			ticks = append(ticks, math.Pow(10, d))
		}
	} else {
		maxY := hi
		if maxY == 0 {
			maxY = 1
		}
		maxY = niceCeil(maxY)
		y = func(v float64) float64 { return top + ph*(1-v/maxY) }
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, maxY*float64(i)/4)
		}
	}
	fmt.Fprintf(b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", x0+left, html.EscapeString(p.title))
	for _, v := range ticks {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0+left, y(v), x0+left+pw, y(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+left-6, y(v)+4, fmtNum(v))
	}
	step := niceStep(float64(n) / 8)
	for t := 0.0; t < float64(n); t += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", x(t), top+ph+18, t)
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0+left, top+ph, x0+left+pw, top+ph)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0+left, top, x0+left, top+ph)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">seconds</text>`+"\n", x0+left+pw/2, h-10)
	ylab := p.yLabel
	if p.log {
		ylab += " (log scale)"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" text-anchor="middle">%s</text>`+"\n", x0+16, top+ph/2, x0+16, top+ph/2, html.EscapeString(ylab))
	for _, m := range p.markers {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`+"\n", x(m.x), top, x(m.x), top+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", x(m.x)+3, top+12, html.EscapeString(m.label))
	}
	for i, s := range p.ss {
		col := palette[i%len(palette)]
		width, opacity := s.width, s.opacity
		if width == 0 {
			width, opacity = 1.8, 1
		}
		attrs := fmt.Sprintf(`fill="none" stroke="%s" stroke-width="%.1f" stroke-opacity="%.2f"`, col, width, opacity)
		if s.dash != "" {
			attrs += fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		// One polyline per run of usable values: a gap breaks the line.
		var pts []string
		flush := func() {
			switch len(pts) {
			case 0:
			case 1: // a lone point between gaps: a dot
				var cx, cy float64
				fmt.Sscanf(pts[0], "%f,%f", &cx, &cy)
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" fill-opacity="%.2f"/>`+"\n", cx, cy, math.Max(2, width/2), col, opacity)
			default:
				fmt.Fprintf(b, `<polyline %s points="%s"/>`+"\n", attrs, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j, v := range s.values {
			if !usable(v) || (p.log && v <= 0) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(j)), y(v)))
		}
		flush()
		ly := top + 14 + float64(i)*18
		leg := fmt.Sprintf(`stroke="%s" stroke-width="%.1f" stroke-opacity="%.2f"`, col, math.Min(width, 4), opacity)
		if s.dash != "" {
			leg += fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x0+left+pw+12, ly-4, x0+left+pw+40, ly-4, leg)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0+left+pw+46, ly, html.EscapeString(s.name))
	}
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func niceStep(v float64) float64 {
	if v < 1 {
		return 1
	}
	return niceCeil(v)
}

func fmtNum(v float64) string {
	switch {
	case v >= 1e6 && v == math.Trunc(v):
		return fmt.Sprintf("%.0fM", v/1e6)
	case v >= 1e4 && v == math.Trunc(v):
		return fmt.Sprintf("%.0fk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// smooth is the trailing moving average of vs over SmoothWindow values;
// gaps (NaN) are left out of the mean, and a window of gaps is a gap.
func smooth(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i := range vs {
		sum, n := 0.0, 0
		for j := max(0, i-SmoothWindow+1); j <= i; j++ {
			if usable(vs[j]) {
				sum += vs[j]
				n++
			}
		}
		out[i] = math.NaN()
		if n > 0 {
			out[i] = sum / float64(n)
		}
	}
	return out
}

func (rep *Report) col(f func(Second) float64) []float64 {
	out := make([]float64, len(rep.Seconds))
	for i, s := range rep.Seconds {
		out[i] = f(s)
	}
	return out
}

// gauge is a cluster gauge; a second the observer did not sample is a gap.
func (rep *Report) gauge(f func(Second) float64) []float64 {
	return rep.col(func(s Second) float64 {
		if !s.Sampled {
			return math.NaN()
		}
		return f(s)
	})
}

// latency is a window percentile by completion time; a second whose
// window holds no answered request is a gap.
func latency(d func(Second) DoneStats, p99 bool) func(Second) float64 {
	return func(s Second) float64 {
		ds := d(s)
		if ds.WindowSamples == 0 {
			return math.NaN()
		}
		if p99 {
			return ds.P99Ms
		}
		return ds.P50Ms
	}
}

func upDone(s Second) DoneStats   { return s.UploadDone }
func downDone(s Second) DoneStats { return s.DownloadDone }

// goodput is succeeded uploads plus downloads per second, by completion.
func goodput(s Second) float64 { return float64(s.UploadDone.Succeeded + s.DownloadDone.Succeeded) }

func (rep *Report) markers() []marker {
	var ms []marker
	for _, e := range rep.Events {
		ms = append(ms, marker{x: e.At, label: e.Label()})
	}
	return ms
}

var smoothNote = fmt.Sprintf("%d s moving average", SmoothWindow)

// panels are the report's charts, by file name.
func (rep *Report) panels() []struct {
	file string
	p    panel
} {
	rejKeys := map[string]bool{}
	for _, s := range rep.Seconds {
		for k := range s.Rejections {
			rejKeys[k] = true
		}
	}
	keys := make([]string, 0, len(rejKeys))
	for k := range rejKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rej []series
	for _, k := range keys {
		rej = append(rej, series{name: k, values: smooth(rep.col(func(s Second) float64 { return float64(s.Rejections[k]) }))})
	}
	if len(rej) == 0 {
		rej = []series{{name: "none", values: rep.col(func(Second) float64 { return 0 })}}
	}
	rate := func(name string, f func(Second) float64) series {
		return series{name: name, values: smooth(rep.col(f))}
	}
	ms := rep.markers()
	mode := " (" + rep.Mode + ")"
	return []struct {
		file string
		p    panel
	}{
		{"uploads.svg", panel{title: "Uploads per second, " + smoothNote + mode, yLabel: "requests/s", markers: ms, ss: styled(
			rate("offered (by arrival)", func(s Second) float64 { return float64(s.Upload.Offered) }),
			rate("admitted (by arrival)", func(s Second) float64 { return float64(s.Upload.Admitted) }),
			rate("succeeded (by answer)", func(s Second) float64 { return float64(s.UploadDone.Succeeded) }),
		)}},
		{"downloads.svg", panel{title: "Downloads per second, " + smoothNote + mode, yLabel: "requests/s", markers: ms, ss: styled(
			rate("offered (by arrival)", func(s Second) float64 { return float64(s.Download.Offered) }),
			rate("admitted (by arrival)", func(s Second) float64 { return float64(s.Download.Admitted) }),
			rate("succeeded (by answer)", func(s Second) float64 { return float64(s.DownloadDone.Succeeded) }),
		)}},
		{"latency.svg", panel{title: fmt.Sprintf("Latency over the last %s of answers%s", ProgressWindow, mode), yLabel: "ms", log: true, markers: ms, ss: styled(
			series{name: "upload p99", values: rep.col(latency(upDone, true))},
			series{name: "upload p50", values: rep.col(latency(upDone, false))},
			series{name: "download p99", values: rep.col(latency(downDone, true))},
			series{name: "download p50", values: rep.col(latency(downDone, false))},
		)}},
		{"rejections.svg", panel{title: "Rejections by reason and business, " + smoothNote + mode, yLabel: "requests/s", markers: ms, ss: styled(rej...)}},
		{"pools.svg", panel{title: "Buffer pools and held notifications" + mode, yLabel: "items", markers: ms, ss: styled(
			series{name: "pool 1 items", values: rep.gauge(func(s Second) float64 { return float64(s.Pool1Items) })},
			series{name: "pool 2 items", values: rep.gauge(func(s Second) float64 { return float64(s.Pool2Items) })},
			series{name: "held notifications", values: rep.gauge(func(s Second) float64 { return float64(s.HeldItems) })},
		)}},
	}
}

// writeCharts writes the report's charts into dir, file names prefixed
// with prefix, and returns their names.
func (rep *Report) writeCharts(dir, prefix string) ([]string, error) {
	var names []string
	for _, c := range rep.panels() {
		name := prefix + c.file
		if err := os.WriteFile(filepath.Join(dir, name), []byte(lineChart(c.p)), 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// compareChart is one SVG with two panels side by side: goodput and upload
// p99 of the flex-off and flex-on runs.
func compareChart(c Comparison) string {
	off, on := " ("+c.Off.Mode+")", " ("+c.On.Mode+")"
	return chartSVG([]panel{
		{title: "Goodput (ok/s), " + smoothNote, yLabel: "succeeded/s", markers: c.On.markers(), ss: styled(
			series{name: "goodput" + off, values: smooth(c.Off.col(goodput))},
			series{name: "goodput" + on, values: smooth(c.On.col(goodput))},
		)},
		{title: fmt.Sprintf("Upload p99 over the last %s of answers", ProgressWindow), yLabel: "ms", log: true, markers: c.On.markers(), ss: styled(
			series{name: "upload p99" + off, values: c.Off.col(latency(upDone, true))},
			series{name: "upload p99" + on, values: c.On.col(latency(upDone, true))},
		)},
	})
}
