package shedding_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"willow/shedding"
)

// BenchmarkAdmit is one admission decision: knob lookup, keyed user hash,
// coarse ratio, level check and window accounting. Besides wall ns/op it
// reports cpu-ns/op, the process CPU time per decision, which a shared
// machine's run queue does not inflate.
func BenchmarkAdmit(b *testing.B) {
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Knobs: knobs(map[string]float64{"avatar": 0.3})})
	if err != nil {
		b.Fatal(err)
	}
	users := make([]string, 1024)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i*7919)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		s.Admit("comment", users[i&1023])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkServerInterceptor is the unary server interceptor alone around
// a no-op handler, in process, for a call carrying business and user as
// the client interceptors send them (plus the headers grpc-go sends): the
// per-call cost BenchmarkUnaryOverhead sees as latency.
func BenchmarkServerInterceptor(b *testing.B) {
	s, err := shedding.New(shedding.Config{}, shedding.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	md := metadata.MD{":authority": {"127.0.0.1:7000"}, "content-type": {"application/grpc"}, "user-agent": {"grpc-go/1.85.0"},
		"grpc-accept-encoding": {"gzip"}, shedding.MDBusiness: {"comment"}, shedding.MDUser: {"user-1"}}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	ic := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: mWork}
	h := func(ctx context.Context, req any) (any, error) { return req, nil }
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := ic(ctx, nil, info, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkUnaryLoopback is a no-op unary RPC over loopback TCP without
// interceptors, with the shedding server interceptor, and with both server
// and client interceptors, in the same run.
func BenchmarkUnaryLoopback(b *testing.B) {
	cases := []struct {
		name           string
		server, client bool
	}{
		{"none", false, false},
		{"server", true, false},
		{"server+client", true, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var s *shedding.Shedder
			if c.server {
				var err error
				if s, err = shedding.New(shedding.Config{}, shedding.Deps{}); err != nil {
					b.Fatal(err)
				}
			}
			var opts []grpc.DialOption
			if c.client {
				opts = append(opts, grpc.WithChainUnaryInterceptor(shedding.UnaryClientInterceptor()))
			}
			cc := serve(b, s, &testServer{}, opts...)
			ctx := context.Background()
			if _, err := call(ctx, cc, mWork, "comment", "user-1"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := call(ctx, cc, mWork, "comment", "user-1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnaryOverhead interleaves no-op unary RPCs over loopback on four
// servers (no interceptor, shedding server interceptor, server + client
// interceptors, and a second server without interceptor as a control), one
// call to each per iteration in a new random order (seeded, so a run is
// repeatable), so the noise of a shared machine, and what the call before
// leaves in the caches, fall on all four alike. It reports each one's
// median latency (robust to the spikes of a shared machine) and the
// overhead of the medians against the bare latency, the mean of the two
// bare servers' medians. %control-none2 is the second bare server against
// the first: what two identical servers differ by in that run, the
// resolution of the overhead figures.
func BenchmarkUnaryOverhead(b *testing.B) {
	s, err := shedding.New(shedding.Config{}, shedding.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	s2, err := shedding.New(shedding.Config{}, shedding.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	conns := []*grpc.ClientConn{
		serve(b, nil, &testServer{}),
		serve(b, s, &testServer{}),
		serve(b, s2, &testServer{}, grpc.WithChainUnaryInterceptor(shedding.UnaryClientInterceptor())),
		serve(b, nil, &testServer{}),
	}
	ctx := context.Background()
	for _, cc := range conns {
		for range 100 { // warm up connections
			if _, err := call(ctx, cc, mWork, "comment", "user-1"); err != nil {
				b.Fatal(err)
			}
		}
	}
	var lat [4][]time.Duration
	order := []int{0, 1, 2, 3}
	rnd := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for b.Loop() {
		rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			start := time.Now()
			if _, err := call(ctx, conns[k], mWork, "comment", "user-1"); err != nil {
				b.Fatal(err)
			}
			lat[k] = append(lat[k], time.Since(start))
		}
	}
	b.StopTimer()
	var med [4]float64
	for k := range lat {
		slices.Sort(lat[k])
		med[k] = float64(lat[k][len(lat[k])/2])
	}
	b.ReportMetric(med[0], "ns-median/none")
	b.ReportMetric(med[1], "ns-median/server")
	b.ReportMetric(med[2], "ns-median/server+client")
	b.ReportMetric(med[3], "ns-median/none2")
	bare := (med[0] + med[3]) / 2
	b.ReportMetric(100*(med[1]-bare)/bare, "%overhead-server")
	b.ReportMetric(100*(med[2]-bare)/bare, "%overhead-server+client")
	b.ReportMetric(100*(med[3]-med[0])/med[0], "%control-none2")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
