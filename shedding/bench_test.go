package shedding_test

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"

	"willow/shedding"
)

// BenchmarkAdmit is one admission decision: knob lookup, keyed user hash,
// coarse ratio, level check and window accounting.
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
	for i := 0; b.Loop(); i++ {
		s.Admit("comment", users[i&1023])
	}
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
