package loadgen

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/rpcstatus"
	"willow/shedding"
)

// TestClassifyLabels: a request's report label is the reason its error
// carries; without one, RESOURCE_EXHAUSTED and NOT_FOUND are labelled with
// the producers' reason constants, anything else with its code.
func TestClassifyLabels(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name   string
		run    context.Context
		err    error
		out    outcome
		reason string
	}{
		{"ok", live, nil, okOutcome, ""},
		{"shed with its reason", live, rpcstatus.New(codes.ResourceExhausted, shedding.ReasonShedRatio, "shed"), rejected, shedding.ReasonShedRatio},
		{"exhausted without reason", live, status.Error(codes.ResourceExhausted, "busy"), rejected, shedding.ReasonOverload},
		{"not found without reason", live, status.Error(codes.NotFound, "gone"), notReady, rpcstatus.ReasonNotFound},
		{"other code", live, status.Error(codes.Unavailable, "down"), failed, "unavailable"},
		{"run cancelled", done, context.Canceled, canceled, "run_cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, reason := classify(tc.run, tc.err)
			if out != tc.out || reason != tc.reason {
				t.Fatalf("classify = %v %q, want %v %q", out, reason, tc.out, tc.reason)
			}
		})
	}
}
