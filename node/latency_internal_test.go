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

// ObserveLatency (the upload front's HTTP) reaches the heartbeat's p99
// and leaves the request counts alone.
func TestObserveLatencyReachesTheLoad(t *testing.T) {
	n, err := New(Config{ID: "lat-1", Role: "upload", Region: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.lis.Close()
	defer n.adminL.Close()
	n.ObserveLatency(1500 * time.Millisecond)
	(*Node)(nil).ObserveLatency(time.Second)
	l := n.load()
	if p := l.GetLatencyP99Ms(); p < 1500 || p > 1500*latencyFactor || l.GetRequests() != 0 {
		t.Fatalf("load p99 %v ms, requests %d; want 1.5 s within ×%v and 0", p, l.GetRequests(), latencyFactor)
	}
	if p := n.load().GetLatencyP99Ms(); p != 0 {
		t.Fatalf("next heartbeat's p99 = %v, want 0", p)
	}
}
