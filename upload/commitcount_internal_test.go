package upload

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// TestCommitCounts: successes and the front's failures reach the
// heartbeat as per-second gauges; a client's mistake counts as neither;
// the uploads begun are their own gauge.
func TestCommitCounts(t *testing.T) {
	var c commitCounts
	t0 := time.Now()
	c.fill(&willowv1.Load{}, t0) // the first call starts the window
	for range 6 {
		c.count(nil)
	}
	c.count(errInternal(errors.New("disk")))
	c.count(rpcstatus.New(codes.Unavailable, ReasonStoreUnavailable, "store down"))
	c.count(fail(ReasonSizeMismatch, "received 1 of 2 bytes")) // the client's mistake
	c.begun.Add(9)
	l := &willowv1.Load{}
	c.fill(l, t0.Add(2*time.Second))
	if got := l.GetGauges()[node.GaugeUploadsPerS]; got != 3 {
		t.Errorf("%s = %v, want 3 (6 in 2 s)", node.GaugeUploadsPerS, got)
	}
	if got := l.GetGauges()[node.GaugeUploadFailuresPerS]; got != 1 {
		t.Errorf("%s = %v, want 1 (2 in 2 s)", node.GaugeUploadFailuresPerS, got)
	}
	if got := l.GetGauges()[node.GaugeUploadsBegunPerS]; got != 4.5 {
		t.Errorf("%s = %v, want 4.5 (9 in 2 s)", node.GaugeUploadsBegunPerS, got)
	}
}
