package node

import (
	"testing"
	"time"
)

// Reconnect delays are spread over [d/2, d]: nodes a master restart cut
// off at once do not all dial it again in the same instant.
func TestJitterSpreadsReconnects(t *testing.T) {
	const d = 800 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 200 {
		j := jitter(d)
		if j < d/2 || j > d {
			t.Fatalf("jitter(%v) = %v, want within [%v, %v]", d, j, d/2, d)
		}
		seen[j] = true
	}
	if len(seen) < 100 {
		t.Errorf("200 delays took only %d distinct values", len(seen))
	}
	if got := jitter(0); got != 0 {
		t.Errorf("jitter(0) = %v", got)
	}
}
