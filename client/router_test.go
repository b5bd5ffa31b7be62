package client_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/client"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
)

// fakeMaster answers Route from a fixed reply and counts calls.
type fakeMaster struct {
	willowv1.UnimplementedMasterServer
	mu    sync.Mutex
	reply *willowv1.RouteResponse
	calls atomic.Int32
	caps  []int32 // each request's max_per_list
}

func (f *fakeMaster) Route(ctx context.Context, req *willowv1.RouteRequest) (*willowv1.RouteResponse, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.caps = append(f.caps, req.GetMaxPerList())
	return f.reply, nil
}

func serveMaster(t *testing.T, fm *fakeMaster) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	willowv1.RegisterMasterServer(s, fm)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String(), s.Stop
}

func reply(retries string) *willowv1.RouteResponse {
	return &willowv1.RouteResponse{
		Primary:         []*willowv1.Endpoint{{NodeId: "a1", Addr: "127.0.0.1:1", Region: "a"}, {NodeId: "a2", Addr: "127.0.0.1:2", Region: "a"}},
		Secondary:       []*willowv1.Endpoint{{NodeId: "b1", Addr: "127.0.0.1:3", Region: "b"}, {NodeId: "b2", Addr: "127.0.0.1:4", Region: "b"}, {NodeId: "b3", Addr: "127.0.0.1:5", Region: "b"}},
		PrimaryRegion:   "a",
		SecondaryRegion: "b",
		TtlMs:           60_000,
		Flex:            &willowv1.FlexState{Version: 1, Knobs: map[string]string{"retries": retries}},
	}
}

func newRouter(t *testing.T, addr string, now func() time.Time) *client.Router {
	t.Helper()
	r, err := client.NewRouter(client.RouterConfig{MasterAddr: addr, Region: "a", Now: now,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRouteCachedAndKeptWhenMasterDown(t *testing.T) {
	fm := &fakeMaster{reply: reply("on")}
	addr, stop := serveMaster(t, fm)
	now := time.Unix(1000, 0)
	r := newRouter(t, addr, func() time.Time { return now })
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := r.Route(ctx, "upload", "moments"); err != nil {
			t.Fatal(err)
		}
	}
	if n := fm.calls.Load(); n != 1 {
		t.Fatalf("master asked %d times within the TTL, want 1", n)
	}
	stop()
	now = now.Add(2 * time.Minute) // past the TTL
	resp, err := r.Route(ctx, "upload", "moments")
	if err != nil || len(resp.GetPrimary()) != 2 {
		t.Fatalf("with the master down Route = %v, %v; want the last good answer", resp, err)
	}
}

func TestCallFailsOverToOtherRegion(t *testing.T) {
	tests := []struct {
		name      string
		retries   string
		failWith  codes.Code
		wantTried []string
		wantErr   bool
	}{
		{"unavailable retries twice on region b", "on", codes.Unavailable, []string{"a", "b", "b"}, true},
		{"retries off: no retry", "off", codes.Unavailable, []string{"a"}, true},
		{"client error: no retry", "on", codes.InvalidArgument, []string{"a"}, true},
		{"success: one attempt", "on", codes.OK, []string{"a"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serveMaster(t, &fakeMaster{reply: reply(tc.retries)})
			r := newRouter(t, addr, nil)
			var tried []string
			err := r.Call(context.Background(), "upload", "moments", func(ctx context.Context, _ *grpc.ClientConn, ep *willowv1.Endpoint) error {
				tried = append(tried, ep.GetRegion())
				if tc.failWith == codes.OK {
					return nil
				}
				return status.Error(tc.failWith, "boom")
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if len(tried) != len(tc.wantTried) {
				t.Fatalf("tried %v, want %v", tried, tc.wantTried)
			}
			for i := range tried {
				if tried[i] != tc.wantTried[i] {
					t.Fatalf("tried %v, want %v", tried, tc.wantTried)
				}
			}
		})
	}
}

func TestRetryBudgetCapsRetries(t *testing.T) {
	addr, _ := serveMaster(t, &fakeMaster{reply: reply("on")})
	now := time.Unix(5000, 0)
	r := newRouter(t, addr, func() time.Time { return now })
	var attempts, calls, spent int
	for i := 0; i < 1000; i++ {
		calls++
		err := r.Call(context.Background(), "upload", "moments", func(context.Context, *grpc.ClientConn, *willowv1.Endpoint) error {
			attempts++
			return status.Error(codes.Unavailable, "down")
		})
		if rpcstatus.Reason(err) == shedding.ReasonRetryBudget {
			spent++
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "down") {
				t.Fatalf("over budget: %v, want RESOURCE_EXHAUSTED retry_budget naming the last error", err)
			}
		}
		if i%100 == 99 {
			now = now.Add(time.Second)
		}
	}
	retries := attempts - calls
	if retries > calls/10+client.DefaultMinRetries {
		t.Fatalf("%d retries for %d calls: over the 10%% budget", retries, calls)
	}
	if retries == 0 {
		t.Fatal("no retries at all: the budget should allow some")
	}
	if spent == 0 {
		t.Fatal("no call failed with reason retry_budget")
	}
}

// TestCallSessionStaysInRegion: a session call retries on another healthy
// node of its region first (never the failed one), and goes to the other
// region only when its region has no untried node; retries off and the
// budget still apply.
func TestCallSessionStaysInRegion(t *testing.T) {
	tests := []struct {
		name      string
		retries   string
		fail      map[string]bool // node IDs that fail UNAVAILABLE
		wantTried []string
		wantErr   bool
	}{
		{"first front down: the other front of region a", "on", map[string]bool{"a1": true}, []string{"a1", "a2"}, false},
		{"region a down: region b", "on", map[string]bool{"a1": true, "a2": true}, []string{"a1", "a2", "b1"}, false},
		{"everything down: MaxRetries", "on", map[string]bool{"a1": true, "a2": true, "b1": true, "b2": true}, []string{"a1", "a2", "b1"}, true},
		{"retries off: no retry", "off", map[string]bool{"a1": true}, []string{"a1"}, true},
		{"success: one attempt", "on", nil, []string{"a1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serveMaster(t, &fakeMaster{reply: reply(tc.retries)})
			r := newRouter(t, addr, nil)
			var tried []string
			err := r.CallSession(context.Background(), "upload", "moments", func(ctx context.Context, _ *grpc.ClientConn, ep *willowv1.Endpoint) error {
				tried = append(tried, ep.GetNodeId())
				if tc.fail[ep.GetNodeId()] {
					return status.Error(codes.Unavailable, "down")
				}
				return nil
			})
			if (err != nil) != tc.wantErr || strings.Join(tried, ",") != strings.Join(tc.wantTried, ",") {
				t.Fatalf("tried %v (err %v), want %v (error %v)", tried, err, tc.wantTried, tc.wantErr)
			}
		})
	}
}

// TestRouterCallPerList: Route asks the master for every endpoint; Call and
// CallSession ask for CallPerList a list (by default enough for
// MaxRetries), each answer cached on its own.
func TestRouterCallPerList(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     client.RouterConfig
		wantCap int32
	}{
		{"default", client.RouterConfig{}, client.DefaultCallPerList},
		{"more retries than the default", client.RouterConfig{MaxRetries: 6}, 7},
		{"set", client.RouterConfig{CallPerList: 2}, 2},
		{"every endpoint", client.RouterConfig{CallPerList: -1}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fm := &fakeMaster{reply: reply("on")}
			addr, _ := serveMaster(t, fm)
			cfg := tt.cfg
			cfg.MasterAddr, cfg.Region = addr, "a"
			r, err := client.NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			if _, err := r.Route(ctx, "upload", ""); err != nil {
				t.Fatal(err)
			}
			ok := func(context.Context, *grpc.ClientConn, *willowv1.Endpoint) error { return nil }
			if err := r.Call(ctx, "upload", "", ok); err != nil {
				t.Fatal(err)
			}
			if err := r.CallSession(ctx, "upload", "", ok); err != nil {
				t.Fatal(err)
			}
			fm.mu.Lock()
			defer fm.mu.Unlock()
			want := []int32{0, tt.wantCap} // Call's answer cached for CallSession
			if tt.wantCap == 0 {
				want = want[:1] // the same answer as Route's, cached
			}
			if len(fm.caps) != len(want) || fm.caps[0] != want[0] || fm.caps[len(fm.caps)-1] != want[len(want)-1] {
				t.Fatalf("max_per_list asked %v, want %v", fm.caps, want)
			}
		})
	}
}
