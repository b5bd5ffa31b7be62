package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"willow/auth"
	"willow/node"
	"willow/shedding"
)

// The chain test service: Echo (unary) and Pipe (bidi stream) answer
// what they get, except "panic" (the handler panics) and "code:N" (the
// handler fails with gRPC code N); OpsOnly is Echo for operators only.
const (
	chainService = "chaintest.Svc"
	mEcho        = "/chaintest.Svc/Echo"
	mPipe        = "/chaintest.Svc/Pipe"
	mOpsOnly     = "/chaintest.Svc/OpsOnly"
	mUndeclared  = "/chaintest.Svc/Undeclared"
	chainSecret  = "chain-cluster-secret"
)

// chainTable is the guard table of the chain test service (Undeclared is
// left out on purpose).
var chainTable = auth.Table{
	mEcho:    {Classes: auth.Node | auth.Client},
	mPipe:    {Classes: auth.Node},
	mOpsOnly: {Classes: auth.Operator},
}

func echo(s string) (string, error) {
	if s == "panic" {
		panic("chain test panic")
	}
	if c, ok := strings.CutPrefix(s, "code:"); ok {
		var code codes.Code
		if err := code.UnmarshalJSON([]byte(c)); err != nil {
			return "", status.Errorf(codes.InvalidArgument, "bad code %q", c)
		}
		return "", status.Errorf(code, "asked for %v", code)
	}
	return s, nil
}

func unaryDesc(name string) grpc.MethodDesc {
	full := "/" + chainService + "/" + name
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			out, err := echo(req.(*wrapperspb.StringValue).GetValue())
			if err != nil {
				return nil, err
			}
			return wrapperspb.String(out), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
	}}
}

var chainDesc = grpc.ServiceDesc{
	ServiceName: chainService,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unaryDesc("Echo"), unaryDesc("OpsOnly"), unaryDesc("Undeclared")},
	Streams: []grpc.StreamDesc{{StreamName: "Pipe", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			for {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				out, err := echo(in.GetValue())
				if err != nil {
					return err
				}
				if err := ss.SendMsg(wrapperspb.String(out)); err != nil {
					return err
				}
			}
		}}},
}

var pipeDesc = &grpc.StreamDesc{StreamName: "Pipe", ServerStreams: true, ClientStreams: true}

// chainNode runs a node with auth (cluster secret and one operator) and
// shedding, the chain test service registered, and returns it with a
// connection presenting node credentials.
func chainNode(tb testing.TB, log *slog.Logger) (*node.Node, *grpc.ClientConn) {
	tb.Helper()
	ops, err := auth.ParseOperators([]byte(auth.OperatorLine("alice", "alice-tok", auth.RoleOncall)))
	if err != nil {
		tb.Fatal(err)
	}
	n, err := node.New(node.Config{ID: "upload-x", Role: "upload", Region: "a", Logger: log, ShutdownGrace: time.Second,
		Auth: &auth.Config{ClusterSecret: chainSecret, Operators: ops}, Shed: &shedding.Config{}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Guard().Declare(chainTable); err != nil {
		tb.Fatal(err)
	}
	n.Server().RegisterService(&chainDesc, struct{}{})
	runNode(tb, n)
	return n, dialChain(tb, n.Addr(), auth.NodeCredentials{Secret: chainSecret, ID: "upload-y", Role: "upload", Instance: "i1"})
}

// runNode runs n until the test ends.
func runNode(tb testing.TB, n *node.Node) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("run: %v", err)
		}
	})
}

// dialChain connects to addr, presenting creds (nil: nothing) on every
// call.
func dialChain(tb testing.TB, addr string, creds any) *grpc.ClientConn {
	tb.Helper()
	var opts []grpc.DialOption
	switch c := creds.(type) {
	case auth.NodeCredentials:
		opts = append(opts, grpc.WithPerRPCCredentials(c))
	case auth.Bearer:
		opts = append(opts, grpc.WithPerRPCCredentials(c))
	}
	cc, err := node.Dial(addr, nil, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

func callEcho(ctx context.Context, cc *grpc.ClientConn, method, s string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(s), out, grpc.WaitForReady(true))
	return out.GetValue(), err
}

// callPipe opens a Pipe stream, sends msgs, closes its side and returns
// the answers and the stream's final error (nil for OK).
func callPipe(ctx context.Context, cc *grpc.ClientConn, msgs ...string) ([]string, error) {
	st, err := cc.NewStream(ctx, pipeDesc, mPipe, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			break // the status comes from RecvMsg
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var got []string
	for {
		out := new(wrapperspb.StringValue)
		if err := st.RecvMsg(out); errors.Is(err, io.EOF) {
			return got, nil
		} else if err != nil {
			return got, err
		}
		got = append(got, out.GetValue())
	}
}

// logRecorder is a slog handler keeping every record at or above level.
type logRecorder struct {
	level slog.Level
	mu    sync.Mutex // guards recs
	recs  []logRec
	attrs []slog.Attr
}

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &childHandler{h, as}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// childHandler is logRecorder.WithAttrs: it records into its parent.
type childHandler struct {
	p     *logRecorder
	attrs []slog.Attr
}

func (c *childHandler) Enabled(ctx context.Context, l slog.Level) bool { return c.p.Enabled(ctx, l) }
func (c *childHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(c.attrs...)
	return c.p.Handle(ctx, r)
}
func (c *childHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &childHandler{c.p, append(append([]slog.Attr(nil), c.attrs...), as...)}
}
func (c *childHandler) WithGroup(string) slog.Handler { return c }

// finished returns the "finished call" records of method (Service/Method).
func (h *logRecorder) finished(method string) []logRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRec
	for _, r := range h.recs {
		if r.msg == "finished call" && "/"+r.attrs["grpc.service"]+"/"+r.attrs["grpc.method"] == method {
			out = append(out, r)
		}
	}
	return out
}

func (h *logRecorder) withMsg(msg string) []logRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRec
	for _, r := range h.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}
