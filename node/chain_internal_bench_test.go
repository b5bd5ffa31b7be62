package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
	"willow/internal/cpustat"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"willow/auth"
	"willow/shedding"
)

// BenchmarkInterceptor is the node's server interceptor alone around a
// no-op handler, in process: a unary call and a stream that receives and
// sends one message, as a node calls the master (cluster-secret node
// credentials, a deadline, the headers grpc-go sends), with a logger at
// info, for the master (no shedding) and for a role with shedding.
// cpu-ns/op is the process CPU per call (the run queue of a shared
// machine inflates ns/op, not this). BenchmarkChain measures the whole call over loopback.
func BenchmarkInterceptor(b *testing.B) {
	const unaryM, streamM = "/bench.Svc/Unary", "/bench.Svc/Stream"
	md := metadata.MD{":authority": {"127.0.0.1:7000"}, "content-type": {"application/grpc"}, "user-agent": {"grpc-go/1.85.0"},
		"grpc-accept-encoding": {"gzip"}, auth.MDClusterSecret: {"s"}, auth.MDNodeID: {"upload-a-1"},
		auth.MDNodeRole: {"upload"}, auth.MDNodeInstance: {"0123456789abcdef01234567"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx = peer.NewContext(metadata.NewIncomingContext(ctx, md), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	req := new(int)
	// The master runs without shedding; every other role with it.
	for _, role := range []string{"master", "upload"} {
		cfg := Config{ID: role + "-x", Role: role, Region: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Auth: &auth.Config{ClusterSecret: "s"}}
		if role != "master" {
			cfg.Shed = &shedding.Config{}
		}
		n, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.lis.Close(); n.adminL.Close() })
		if err := n.Guard().Declare(auth.Table{unaryM: {Classes: auth.Node}, streamM: {Classes: auth.Node}}); err != nil {
			b.Fatal(err)
		}
		b.Run(role+"/unary", func(b *testing.B) {
			info := &grpc.UnaryServerInfo{FullMethod: unaryM}
			h := func(ctx context.Context, req any) (any, error) { return req, nil }
			b.ReportAllocs()
			cpu0 := cpustat.Process()
			for b.Loop() {
				if _, err := n.unaryInterceptor(ctx, req, info, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpustat.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(role+"/stream", func(b *testing.B) {
			info := &grpc.StreamServerInfo{FullMethod: streamM, IsClientStream: true, IsServerStream: true}
			ss := &nopStream{ctx: ctx}
			h := func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(req); err != nil {
					return err
				}
				return ss.SendMsg(req)
			}
			b.ReportAllocs()
			cpu0 := cpustat.Process()
			for b.Loop() {
				if err := n.streamInterceptor(nil, ss, info, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpustat.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// nopStream is a server stream whose messages go nowhere.
type nopStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *nopStream) Context() context.Context     { return s.ctx }
func (s *nopStream) SendMsg(any) error            { return nil }
func (s *nopStream) RecvMsg(any) error            { return nil }
func (s *nopStream) SetHeader(metadata.MD) error  { return nil }
func (s *nopStream) SendHeader(metadata.MD) error { return nil }
func (s *nopStream) SetTrailer(metadata.MD)       {}
