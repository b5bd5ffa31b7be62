package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"willow/internal/cpustat"

	"google.golang.org/grpc"

	"willow/auth"
)

// BenchmarkChain is a no-op call over loopback TCP through a node's gRPC
// server (the whole server chain: metrics, logging, guard with node
// credentials, stats, drills, shedding, recovery; logger at info, as the
// services run) and through a bare grpc.Server serving the same service,
// unary and one-message bidi stream. Besides ns/op and allocs/op (whole
// process: client and server) it reports cpu-ns/op, the process CPU per
// call, which a shared machine's run queue does not inflate. The chain's
// own cost is node minus bare.
func BenchmarkChain(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_, nodeConn := chainNode(b, log)
	bare := grpc.NewServer()
	bare.RegisterService(&chainDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = bare.Serve(lis) }()
	b.Cleanup(bare.Stop)
	// The same credentials, so that only the server side differs.
	bareConn := dialChain(b, lis.Addr().String(), auth.NodeCredentials{Secret: chainSecret, ID: "upload-y", Role: "upload", Instance: "i1"})
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func(*grpc.ClientConn) error
	}{
		{"unary", func(cc *grpc.ClientConn) error { _, err := callEcho(ctx, cc, mEcho, "x"); return err }},
		{"stream", func(cc *grpc.ClientConn) error { _, err := callPipe(ctx, cc, "x"); return err }},
	} {
		for _, s := range []struct {
			name string
			cc   *grpc.ClientConn
		}{{"bare", bareConn}, {"node", nodeConn}} {
			b.Run(c.name+"/"+s.name, func(b *testing.B) {
				for range 100 {
					if err := c.call(s.cc); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpustat.Process()
				for b.Loop() {
					if err := c.call(s.cc); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpustat.Process()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
