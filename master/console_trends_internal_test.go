package master

import "testing"

func TestTrendRingIsBounded(t *testing.T) {
	var r trendRing
	for i := range 3 * trendPoints {
		r.add(trendPoint{AtMs: int64(i)})
	}
	pts := r.points()
	if len(pts) != trendPoints || pts[0].AtMs != 2*trendPoints || pts[len(pts)-1].AtMs != 3*trendPoints-1 {
		t.Fatalf("ring holds %d points from %d to %d", len(pts), pts[0].AtMs, pts[len(pts)-1].AtMs)
	}
}

func TestSummaryLevel(t *testing.T) {
	for _, tt := range []struct{ sum, region, want string }{
		{"v3 red", "a", "red"},
		{"v3 red retries=true | region:a blue image_quality=40", "a", "blue"},
		{"v3 red | region:a blue", "b", "red"},
		{"v4 normal | region:a image_quality=40 (expires 2026-12-01T10:00:00Z)", "a", "normal"},
		{"v2 image_quality=40", "a", "normal"},
		{"", "a", ""},
		{"latency 200 ms for 1m", "a", ""},
	} {
		if got := summaryLevel(tt.sum, tt.region); got != tt.want {
			t.Errorf("summaryLevel(%q, %s) = %q, want %q", tt.sum, tt.region, got, tt.want)
		}
	}
}
