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

// series is one line of a chart.
type series struct {
	name   string
	values []float64
}

// marker is a vertical line at x with a label (a flex change).
type marker struct {
	x     float64
	label string
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// lineChart renders series over x = 0..n-1 seconds as an SVG document.
func lineChart(title, yLabel string, ss []series, markers []marker) string {
	const w, h, left, right, top, bottom = 900.0, 360.0, 70.0, 180.0, 40.0, 50.0
	n := 0
	maxY := 0.0
	for _, s := range ss {
		if len(s.values) > n {
			n = len(s.values)
		}
		for _, v := range s.values {
			if v > maxY && !math.IsInf(v, 0) && !math.IsNaN(v) {
				maxY = v
			}
		}
	}
	if maxY == 0 {
		maxY = 1
	}
	maxY = niceCeil(maxY)
	if n < 2 {
		n = 2
	}
	pw, ph := w-left-right, h-top-bottom
	x := func(i float64) float64 { return left + pw*i/float64(n-1) }
	y := func(v float64) float64 { return top + ph*(1-v/maxY) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	// Axes and grid.
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+pw, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, fmtNum(v))
	}
	step := niceStep(float64(n) / 8)
	for t := 0.0; t < float64(n); t += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", x(t), top+ph+18, t)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, top+ph, left+pw, top+ph)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, top, left, top+ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">seconds</text>`+"\n", left+pw/2, h-10)
	fmt.Fprintf(&b, `<text x="16" y="%.1f" transform="rotate(-90 16 %.1f)" text-anchor="middle">%s</text>`+"\n", top+ph/2, top+ph/2, html.EscapeString(yLabel))
	for _, m := range markers {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`+"\n", x(m.x), top, x(m.x), top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", x(m.x)+3, top+12, html.EscapeString(m.label))
	}
	for i, s := range ss {
		col := palette[i%len(palette)]
		var pts []string
		for j, v := range s.values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(j)), y(v)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		}
		ly := top + 14 + float64(i)*18
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", left+pw+12, ly-4, left+pw+30, ly-4, col)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+36, ly, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
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
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// writeCharts writes the report's charts into dir, file names prefixed
// with prefix, and returns their names.
func (rep *Report) writeCharts(dir, prefix string) ([]string, error) {
	n := len(rep.Seconds)
	col := func(f func(Second) float64) []float64 {
		out := make([]float64, n)
		for i, s := range rep.Seconds {
			out[i] = f(s)
		}
		return out
	}
	var markers []marker
	for _, e := range rep.Events {
		markers = append(markers, marker{x: e.At, label: e.Label()})
	}
	rejKeys := map[string]bool{}
	for _, s := range rep.Seconds {
		for k := range s.Rejections {
			rejKeys[k] = true
		}
	}
	var rej []series
	keys := make([]string, 0, len(rejKeys))
	for k := range rejKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rej = append(rej, series{k, col(func(s Second) float64 { return float64(s.Rejections[k]) })})
	}
	if len(rej) == 0 {
		rej = []series{{"none", col(func(Second) float64 { return 0 })}}
	}
	charts := []struct {
		file, title, y string
		ss             []series
	}{
		{"uploads.svg", "Uploads per second", "requests/s", []series{
			{"offered", col(func(s Second) float64 { return float64(s.Upload.Offered) })},
			{"admitted", col(func(s Second) float64 { return float64(s.Upload.Admitted) })},
			{"succeeded", col(func(s Second) float64 { return float64(s.Upload.Succeeded) })},
		}},
		{"downloads.svg", "Downloads per second", "requests/s", []series{
			{"offered", col(func(s Second) float64 { return float64(s.Download.Offered) })},
			{"admitted", col(func(s Second) float64 { return float64(s.Download.Admitted) })},
			{"succeeded", col(func(s Second) float64 { return float64(s.Download.Succeeded) })},
		}},
		{"latency.svg", "Latency", "ms", []series{
			{"upload p50", col(func(s Second) float64 { return s.Upload.P50Ms })},
			{"upload p99", col(func(s Second) float64 { return s.Upload.P99Ms })},
			{"download p50", col(func(s Second) float64 { return s.Download.P50Ms })},
			{"download p99", col(func(s Second) float64 { return s.Download.P99Ms })},
		}},
		{"rejections.svg", "Rejections by reason and business", "requests/s", rej},
		{"pools.svg", "Buffer pools and held notifications", "items", []series{
			{"pool 1 items", col(func(s Second) float64 { return float64(s.Pool1Items) })},
			{"pool 2 items", col(func(s Second) float64 { return float64(s.Pool2Items) })},
			{"held notifications", col(func(s Second) float64 { return float64(s.HeldItems) })},
		}},
	}
	var names []string
	for _, c := range charts {
		name := prefix + c.file
		svg := lineChart(c.title+" ("+rep.Mode+")", c.y, c.ss, markers)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}
