package loadgen

import (
	"bytes"
	"strings"
	"testing"
)

// TestAutoSignalPeaks: an auto-flex run's report names each signal's
// highest value and its second; a run without signals says nothing.
func TestAutoSignalPeaks(t *testing.T) {
	rep := &Report{Profile: "steady", Mode: "auto-flex", Seconds: []Second{
		{T: 0},
		{T: 7, AutoSignals: map[string]float64{"compress_cpu_forecast_normal": 0.41, "upload_arrivals": 0.6}},
		{T: 65, AutoSignals: map[string]float64{"compress_cpu_forecast_normal": 0.5349, "upload_arrivals": 0.5}},
	}}
	got := strings.Join(rep.autoSignalPeaks(), ", ")
	if want := "compress_cpu_forecast_normal 0.535 (1:05), upload_arrivals 0.6 (0:07)"; got != want {
		t.Fatalf("peaks %q, want %q", got, want)
	}
	var b bytes.Buffer
	rep.markdown(&b, nil)
	if !strings.Contains(b.String(), "Auto-flex signals the master read, the highest of each (at the run's second): "+got+".") {
		t.Fatalf("report lacks the peaks:\n%s", b.String())
	}
	b.Reset()
	(&Report{Profile: "steady", Mode: "flex-on", Seconds: []Second{{T: 0}}}).markdown(&b, nil)
	if strings.Contains(b.String(), "Auto-flex signals") {
		t.Fatalf("a run without signals names them:\n%s", b.String())
	}
}
