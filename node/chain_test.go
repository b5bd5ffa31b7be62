package node_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/rpcstatus"
)

// series returns the value of the family's series with exactly the given
// labels (counter value, histogram sample count), and whether it exists.
func series(t *testing.T, reg prometheus.Gatherer, family string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue next
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

func rpcLabels(typ, method string, code ...string) map[string]string {
	l := map[string]string{"grpc_type": typ, "grpc_service": chainService, "grpc_method": method}
	if len(code) > 0 {
		l["grpc_code"] = code[0]
	}
	return l
}

// TestChainMetrics: every call through a node's server is counted in
// go-grpc-middleware's Prometheus series (names and labels as that
// provider exports them), refused and panicking calls too, and every
// method's series exist from the start.
func TestChainMetrics(t *testing.T) {
	n, cc := chainNode(t, slog.New(slog.DiscardHandler))
	reg := n.Registry()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// From the start, before any call of the service: every code of
	// every method (the node initializes them before it serves).
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"OK", "Unauthenticated", "Internal", "DataLoss"} {
		if v, ok := series(t, reg, "grpc_server_handled_total", rpcLabels("unary", "Echo", c)); !ok || v != 0 {
			t.Errorf("handled_total{Echo,%s} at start = %v, %v; want 0, present", c, v, ok)
		}
	}
	if _, ok := series(t, reg, "grpc_server_handling_seconds", rpcLabels("bidi_stream", "Pipe")); !ok {
		t.Error("grpc_server_handling_seconds{Pipe} missing at start")
	}

	for _, s := range []string{"a", "b", "code:" + strconv.Itoa(int(codes.NotFound)), "panic"} {
		_, _ = callEcho(ctx, cc, mEcho, s)
	}
	if _, err := callEcho(ctx, dialChain(t, n.Addr(), nil), mEcho, "x"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Echo without credentials: %v", err)
	}
	if got, err := callPipe(ctx, cc, "1", "2", "3"); err != nil || len(got) != 3 {
		t.Fatalf("Pipe = %v, %v", got, err)
	}
	if _, err := callPipe(ctx, cc, "1", "code:"+strconv.Itoa(int(codes.Unavailable))); status.Code(err) != codes.Unavailable {
		t.Fatalf("Pipe with an error = %v", err)
	}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"grpc_server_started_total", rpcLabels("unary", "Echo"), 5},
		{"grpc_server_handled_total", rpcLabels("unary", "Echo", "OK"), 2},
		{"grpc_server_handled_total", rpcLabels("unary", "Echo", "NotFound"), 1},
		{"grpc_server_handled_total", rpcLabels("unary", "Echo", "Internal"), 1},
		{"grpc_server_handled_total", rpcLabels("unary", "Echo", "Unauthenticated"), 1},
		{"grpc_server_msg_received_total", rpcLabels("unary", "Echo"), 5},
		{"grpc_server_msg_sent_total", rpcLabels("unary", "Echo"), 2},
		{"grpc_server_handling_seconds", rpcLabels("unary", "Echo"), 5},
		{"grpc_server_started_total", rpcLabels("bidi_stream", "Pipe"), 2},
		{"grpc_server_handled_total", rpcLabels("bidi_stream", "Pipe", "OK"), 1},
		{"grpc_server_handled_total", rpcLabels("bidi_stream", "Pipe", "Unavailable"), 1},
		{"grpc_server_msg_received_total", rpcLabels("bidi_stream", "Pipe"), 5},
		{"grpc_server_msg_sent_total", rpcLabels("bidi_stream", "Pipe"), 4},
		{"grpc_server_handling_seconds", rpcLabels("bidi_stream", "Pipe"), 2},
	} {
		if v, ok := series(t, reg, c.family, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.family, c.labels, v, ok, c.want)
		}
	}
	if probs, err := testutil.GatherAndLint(reg, "grpc_server_handled_total", "grpc_server_handling_seconds"); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
}

// TestChainLogs: a failed call is logged at its code's level with the
// call's fields whatever the logger's level; a successful one only when
// the logger is at debug.
func TestChainLogs(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			rec := &logRecorder{level: level}
			_, cc := chainNode(t, slog.New(rec))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := callEcho(ctx, cc, mEcho, "ok"); err != nil {
				t.Fatal(err)
			}
			for _, c := range []codes.Code{codes.Internal, codes.Unavailable, codes.NotFound} {
				_, _ = callEcho(ctx, cc, mEcho, "code:"+strconv.Itoa(int(c)))
			}
			if _, err := callPipe(ctx, cc, "code:"+strconv.Itoa(int(codes.DataLoss))); status.Code(err) != codes.DataLoss {
				t.Fatal(err)
			}
			want := map[string]slog.Level{"Internal": slog.LevelError, "Unavailable": slog.LevelWarn, "DataLoss": slog.LevelError}
			if level == slog.LevelDebug {
				want["OK"], want["NotFound"] = slog.LevelDebug, slog.LevelDebug
			}
			got := map[string]logRec{}
			for _, r := range append(rec.finished(mEcho), rec.finished(mPipe)...) {
				got[r.attrs["grpc.code"]] = r
			}
			if len(got) != len(want) {
				t.Errorf("finished calls logged for codes %v, want %v", keys(got), want)
			}
			for code, lvl := range want {
				r, ok := got[code]
				if !ok {
					t.Errorf("no finished call logged for %s", code)
					continue
				}
				if r.level != lvl {
					t.Errorf("%s logged at %v, want %v", code, r.level, lvl)
				}
				for _, k := range []string{"protocol", "grpc.component", "grpc.method_type", "grpc.start_time", "grpc.time_ms", "peer.address", "grpc.request.deadline", "node", "role"} {
					if r.attrs[k] == "" {
						t.Errorf("%s: field %s missing: %v", code, k, r.attrs)
					}
				}
				if (code == "OK") != (r.attrs["grpc.error"] == "") {
					t.Errorf("%s: grpc.error = %q", code, r.attrs["grpc.error"])
				}
			}
			if r := got["Unavailable"]; r.attrs["grpc.method_type"] != "unary" || r.attrs["grpc.component"] != "server" || r.attrs["protocol"] != "grpc" {
				t.Errorf("unary fields: %v", r.attrs)
			}
			if r := got["DataLoss"]; r.attrs["grpc.method_type"] != "bidi_stream" {
				t.Errorf("stream fields: %v", r.attrs)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestChainGuard: the guard refuses, through the wire, callers outside a
// method's classes and methods without a class, unary and stream, with
// the same codes and reasons as auth.Guard.Authorize.
func TestChainGuard(t *testing.T) {
	n, nodeConn := chainNode(t, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	none := dialChain(t, n.Addr(), nil)
	op := dialChain(t, n.Addr(), auth.Bearer("alice-tok"))
	forged := dialChain(t, n.Addr(), auth.NodeCredentials{Secret: "wrong", ID: "upload-y", Role: "upload"})
	for _, c := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"node on node method", func() error { _, err := callEcho(ctx, nodeConn, mEcho, "x"); return err }, codes.OK, ""},
		{"node on operator method", func() error { _, err := callEcho(ctx, nodeConn, mOpsOnly, "x"); return err }, codes.PermissionDenied, auth.ReasonWrongClass},
		{"operator on operator method", func() error { _, err := callEcho(ctx, op, mOpsOnly, "x"); return err }, codes.OK, ""},
		{"operator on node stream", func() error { _, err := callPipe(ctx, op, "x"); return err }, codes.PermissionDenied, auth.ReasonWrongClass},
		{"no credentials", func() error { _, err := callEcho(ctx, none, mEcho, "x"); return err }, codes.Unauthenticated, auth.ReasonNoCredentials},
		{"no credentials stream", func() error { _, err := callPipe(ctx, none, "x"); return err }, codes.Unauthenticated, auth.ReasonNoCredentials},
		{"wrong secret", func() error { _, err := callEcho(ctx, forged, mEcho, "x"); return err }, codes.Unauthenticated, auth.ReasonBadCredentials},
		{"unclassified", func() error { _, err := callEcho(ctx, nodeConn, mUndeclared, "x"); return err }, codes.PermissionDenied, auth.ReasonUnclassified},
		{"node stream", func() error { _, err := callPipe(ctx, nodeConn, "x", "y"); return err }, codes.OK, ""},
	} {
		err := c.call()
		if status.Code(err) != c.code || rpcstatus.Reason(err) != c.reason {
			t.Errorf("%s: %v (reason %q), want %v %q", c.name, err, rpcstatus.Reason(err), c.code, c.reason)
		}
	}
}

// TestChainRecoversPanics: a handler's panic becomes INTERNAL, is logged,
// and the node goes on serving, unary and stream.
func TestChainRecoversPanics(t *testing.T) {
	rec := &logRecorder{level: slog.LevelInfo}
	_, cc := chainNode(t, slog.New(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := callEcho(ctx, cc, mEcho, "panic"); status.Code(err) != codes.Internal {
		t.Errorf("unary panic: %v, want INTERNAL", err)
	}
	if _, err := callPipe(ctx, cc, "a", "panic"); status.Code(err) != codes.Internal {
		t.Errorf("stream panic: %v, want INTERNAL", err)
	}
	if got, err := callEcho(ctx, cc, mEcho, "after"); err != nil || got != "after" {
		t.Errorf("after the panics: %q, %v", got, err)
	}
	if p := rec.withMsg("panic in handler"); len(p) != 2 || p[0].level != slog.LevelError || p[0].attrs["panic"] != "chain test panic" {
		t.Errorf("panic logs: %+v", p)
	}
}
