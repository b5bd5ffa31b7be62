package shedding_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"willow/flex"
	"willow/shedding"
)

// Full method names of the test service.
const (
	mWork   = "/test.Svc/Work"
	mBegin  = "/test.Svc/Begin"
	mHealth = "/test.Svc/Health"
	mWatch  = "/test.Svc/Watch"
)

// clock is a fake time source.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 29, 10, 5, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// knobs returns a Deps.Knobs func with the given shed ratios.
func knobs(ratios map[string]float64) func() flex.Knobs {
	return func() flex.Knobs {
		k := flex.Defaults()
		for b, r := range ratios {
			k.ShedRatio[b] = r
		}
		return k
	}
}

// testServer is a tiny gRPC service whose methods answer with what
// WouldShed said, after an optional service time or block.
type testServer struct {
	service time.Duration
	block   chan struct{} // when non-nil, Work waits for it to close
	calls   atomic.Int64
	active  atomic.Int64
}

func (ts *testServer) handle(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	ts.calls.Add(1)
	ts.active.Add(1)
	defer ts.active.Add(-1)
	if ts.block != nil {
		<-ts.block
	}
	if ts.service > 0 {
		time.Sleep(ts.service)
	}
	r, _ := shedding.WouldShed(ctx)
	return wrapperspb.String(r), nil
}

func unary(method string) grpc.MethodDesc {
	_, name := splitMethod(method)
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(*testServer).handle(ctx, method, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}}
}

func splitMethod(m string) (string, string) {
	for i := len(m) - 1; i >= 0; i-- {
		if m[i] == '/' {
			return m[:i], m[i+1:]
		}
	}
	return "", m
}

var testDesc = grpc.ServiceDesc{
	ServiceName: "test.Svc",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unary(mWork), unary(mBegin), unary(mHealth)},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			out, err := srv.(*testServer).handle(ss.Context(), mWatch, in)
			if err != nil {
				return err
			}
			return ss.SendMsg(out)
		},
	}},
}

// serve starts the test service on loopback, with s's interceptors when s
// is non-nil, and returns a client connection.
func serve(t testing.TB, s *shedding.Shedder, ts *testServer, clientOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if s != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&testDesc, ts)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// call invokes a unary method as business/user and returns WouldShed's
// reason as seen by the handler.
func call(ctx context.Context, cc *grpc.ClientConn, method, business, user string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(shedding.WithRequest(ctx, business, user), method, wrapperspb.String("x"), out, opts...)
	return out.GetValue(), err
}

// watch opens the server stream as business/user and reads its message.
func watch(ctx context.Context, cc *grpc.ClientConn, business, user string) error {
	cs, err := cc.NewStream(shedding.WithRequest(ctx, business, user), &testDesc.Streams[0], mWatch)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	return cs.RecvMsg(new(wrapperspb.StringValue))
}
