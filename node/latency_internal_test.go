package node

import (
	"testing"
	"time"
)

func TestLatencyP99(t *testing.T) {
	var h latencyHist
	if p := h.p99(); p != 0 {
		t.Fatalf("p99 without requests = %v, want 0", p)
	}
	for range 990 {
		h.observe(3 * time.Millisecond)
	}
	for range 10 {
		h.observe(24 * time.Second)
	}
	// 1% at 24 s: the p99 is the 990th value, 3 ms, within the bucket factor.
	if p := h.p99(); p < 3 || p > 3*latencyFactor {
		t.Fatalf("p99 = %v ms, want 3 ms within ×%v", p, latencyFactor)
	}
	for range 98 {
		h.observe(time.Millisecond)
	}
	for range 2 {
		h.observe(24 * time.Second)
	}
	if p := h.p99(); p < 24000 || p > 24000*latencyFactor {
		t.Fatalf("p99 = %v ms, want 24 s within ×%v (the counts reset between heartbeats)", p, latencyFactor)
	}
	h.observe(time.Duration(1 << 62))
	if p := h.p99(); p <= 0 {
		t.Fatalf("p99 of a huge duration = %v", p)
	}
}
