package node

import (
	"context"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// TestChainCountsForHeartbeats: the server interceptor counts calls and
// server faults for the heartbeat's load, but not health checks or the
// Watch stream, and leaves nothing in flight.
func TestChainCountsForHeartbeats(t *testing.T) {
	n, err := New(Config{ID: "upload-x", Role: "upload", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.lis.Close(); n.adminL.Close() })
	const m = "/chaintest.Svc/Echo"
	if err := n.Guard().Declare(auth.Table{m: {Classes: auth.Node}, willowv1.Master_Watch_FullMethodName: {Classes: auth.Node}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, err := range []error{nil, status.Error(codes.Internal, "x"), status.Error(codes.NotFound, "x"), nil} {
		h := func(context.Context, any) (any, error) { return nil, err }
		_, _ = n.unaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, h)
	}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	_, _ = n.unaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName}, ok)
	ss := &nopStream{ctx: ctx}
	streamOK := func(any, grpc.ServerStream) error { return nil }
	_ = n.streamInterceptor(nil, ss, &grpc.StreamServerInfo{FullMethod: willowv1.Master_Watch_FullMethodName, IsServerStream: true}, streamOK)
	_ = n.streamInterceptor(nil, ss, &grpc.StreamServerInfo{FullMethod: m, IsServerStream: true}, func(any, grpc.ServerStream) error {
		return status.Error(codes.Unavailable, "x")
	})
	l := n.load()
	if l.GetRequests() != 5 || l.GetErrors() != 2 || l.GetInFlight() != 0 {
		t.Errorf("load: requests %d errors %d in flight %d, want 5, 2, 0", l.GetRequests(), l.GetErrors(), l.GetInFlight())
	}
	if l.GetLatencyP99Ms() <= 0 {
		t.Errorf("latency p99 %v, want > 0", l.GetLatencyP99Ms())
	}
}
