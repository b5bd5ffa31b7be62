package master_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"willow/auth"
	"willow/flex"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

const token = "t"

type testMaster struct {
	srv    *master.Server
	node   *node.Node
	client willowv1.MasterClient
	stop   func()
}

// startMaster runs a master on rdb until the test ends (or stop).
func startMaster(t *testing.T, rdb redis.UniversalClient, id string) *testMaster {
	t.Helper()
	return startMasterWith(t, rdb, id, master.Config{})
}

// startMasterWith is startMaster with cfg (its token and operators are
// the tests' own).
func startMasterWith(t *testing.T, rdb redis.UniversalClient, id string, cfg master.Config) *testMaster {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.New(node.Config{ID: id, Role: "master", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg.OncallToken, cfg.Operators = token, testOperators(t)
	s, err := master.New(cfg, master.Deps{Node: n, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.Run(ctx) }()
	go func() { defer wg.Done(); s.Run(ctx) }()
	select {
	case <-s.Following():
	case <-time.After(10 * time.Second):
		t.Fatal("master did not subscribe to flex changes within 10s")
	}
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { conn.Close(); cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return &testMaster{srv: s, node: n, client: willowv1.NewMasterClient(conn), stop: stop}
}

// Named operator tokens of the test masters, besides the legacy token.
const (
	carolToken  = "carol-oncall-token"
	readerToken = "reader-read-token"
)

func testOperators(t *testing.T) *auth.Operators {
	t.Helper()
	ops, err := auth.ParseOperators([]byte(auth.OperatorLine("carol", carolToken, auth.RoleOncall) +
		auth.OperatorLine("reader", readerToken, auth.RoleRead)))
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func set(t *testing.T, c willowv1.MasterClient, req *willowv1.SetFlexRequest) *willowv1.FlexState {
	t.Helper()
	if req.Token == "" {
		req.Token = token
	}
	if req.Reason == "" {
		req.Reason = "test"
	}
	resp, err := c.SetFlex(ctxT(t), req)
	if err != nil {
		t.Fatalf("SetFlex(%v): %v", req, err)
	}
	return resp.GetFlex()
}

func TestSetFlexValidation(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		tests := []struct {
			name   string
			req    *willowv1.SetFlexRequest
			code   codes.Code
			reason string
			msg    string
		}{
			{"ratio over 1", &willowv1.SetFlexRequest{Knobs: map[string]string{"timeline_delay_ratio": "1.2"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "timeline_delay_ratio=\"1.2\": allowed a number in [0,1]"},
			{"shed ratio negative", &willowv1.SetFlexRequest{Knobs: map[string]string{"shed_ratio.moments": "-1"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "shed_ratio.moments"},
			{"quality under 10", &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "5"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "image_quality=\"5\": allowed an integer in [10,95]"},
			{"quality over 95", &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "99"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "[10,95]"},
			{"bitrate under 300", &willowv1.SetFlexRequest{Knobs: map[string]string{"video_bitrate_kbps": "200"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "video_bitrate_kbps=\"200\": allowed an integer in [300,1800]"},
			{"bitrate over normal", &willowv1.SetFlexRequest{Knobs: map[string]string{"video_bitrate_kbps": "2400"}}, codes.InvalidArgument, flex.ReasonInvalidKnob, "[300,1800]"},
			{"unknown knob", &willowv1.SetFlexRequest{Knobs: map[string]string{"turbo": "on"}}, codes.InvalidArgument, flex.ReasonUnknownKnob, "unknown knob \"turbo\""},
			{"unknown business", &willowv1.SetFlexRequest{Knobs: map[string]string{"shed_ratio.games": "0.5"}}, codes.InvalidArgument, flex.ReasonUnknownBusiness, "shed_ratio.games: unknown business"},
			{"unknown level", &willowv1.SetFlexRequest{Level: "purple"}, codes.InvalidArgument, flex.ReasonUnknownLevel, "purple"},
			{"expiry in the past", &willowv1.SetFlexRequest{Level: "blue", ForMs: -1000}, codes.InvalidArgument, master.ReasonInvalidExpiry, "expiry is in the past"},
			{"bad scope", &willowv1.SetFlexRequest{Level: "blue", Scope: "zone:x"}, codes.InvalidArgument, flex.ReasonInvalidScope, "region:NAME"},
			{"no reason", &willowv1.SetFlexRequest{Level: "blue", Reason: "-"}, codes.InvalidArgument, master.ReasonMissingReason, "reason"},
			{"nothing", &willowv1.SetFlexRequest{}, codes.InvalidArgument, master.ReasonEmptyChange, "nothing to change"},
			{"no token", &willowv1.SetFlexRequest{Level: "red", Token: "-"}, codes.Unauthenticated, auth.ReasonNoCredentials, "token"},
			{"wrong token", &willowv1.SetFlexRequest{Level: "red", Token: "nope"}, codes.Unauthenticated, auth.ReasonBadCredentials, "unknown"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req := tt.req
				switch req.Token {
				case "":
					req.Token = token
				case "-":
					req.Token = ""
				}
				switch req.Reason {
				case "":
					req.Reason = "test"
				case "-":
					req.Reason = ""
				}
				_, err := m.client.SetFlex(ctxT(t), req)
				if status.Code(err) != tt.code || rpcstatus.Reason(err) != tt.reason || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err = %v (reason %q), want %v %s containing %q", err, rpcstatus.Reason(err), tt.code, tt.reason, tt.msg)
				}
			})
		}
		st, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if err != nil || st.GetVersion() != 1 || st.GetLevel() != "normal" {
			t.Fatalf("rejected changes changed the state: %v %v", st, err)
		}
		// Valid edges pass.
		st = set(t, m.client, &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "10", "timeline_delay_ratio": "1", "video_bitrate_kbps": "300", "shed_ratio.prefetch": "0"}})
		if st.GetVersion() != 2 || st.GetKnobs()["image_quality"] != "10" {
			t.Fatalf("state = %v", st)
		}
	})
}

func TestSetFlexLevelsScopesRollback(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		st := set(t, m.client, &willowv1.SetFlexRequest{Level: "yellow", Scope: "region:a"})
		if st.GetLevel() != "normal" || len(st.GetScopes()) != 1 || st.GetScopes()[0].GetKnobs()["retries"] != "off" {
			t.Fatalf("scoped yellow: %v", st)
		}
		st = set(t, m.client, &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "40"}})
		if st.GetKnobs()["image_quality"] != "40" || len(st.GetScopes()) != 1 {
			t.Fatalf("knob on top: %v", st)
		}
		// Widening: the global level switch supersedes the staged rollout.
		st = set(t, m.client, &willowv1.SetFlexRequest{Level: "red"})
		if st.GetVersion() != 4 || st.GetLevel() != "red" || len(st.GetScopes()) != 0 || st.GetKnobs()["image_quality"] != "50" || st.GetKnobs()["shed_ratio.prefetch"] != "0.8" {
			t.Fatalf("red: %v", st)
		}
		resp, err := m.client.RollbackFlex(ctxT(t), &willowv1.RollbackFlexRequest{Token: token, Reason: "too harsh"})
		if err != nil {
			t.Fatal(err)
		}
		st = resp.GetFlex()
		if st.GetVersion() != 5 || st.GetLevel() != "normal" || st.GetKnobs()["image_quality"] != "40" || len(st.GetScopes()) != 1 {
			t.Fatalf("rollback: %v", st)
		}
		if resp.GetPrevious().GetLevel() != "red" {
			t.Fatalf("previous = %v", resp.GetPrevious())
		}
		_, err = m.client.RollbackFlex(ctxT(t), &willowv1.RollbackFlexRequest{Token: token})
		if rpcstatus.Reason(err) != master.ReasonMissingReason {
			t.Fatalf("rollback without reason: %v", err)
		}
		// Dry run does not change anything.
		dr, err := m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Level: "blue", Reason: "preview", DryRun: true, Token: token})
		if err != nil || dr.GetFlex().GetLevel() != "blue" {
			t.Fatalf("dry run: %v %v", dr, err)
		}
		if cur, _ := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{}); cur.GetVersion() != 5 {
			t.Fatalf("dry run changed the version: %v", cur)
		}
	})
}

func TestSetFlexCompareAndSet(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		a := startMaster(t, rdb, "master-a")
		b := startMaster(t, rdb, "master-b")
		st := set(t, a.client, &willowv1.SetFlexRequest{Level: "blue"})
		// Two on-calls both read version 1 and change it: the second loses.
		set(t, a.client, &willowv1.SetFlexRequest{Level: "yellow", ExpectedVersion: st.GetVersion()})
		_, err := b.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Token: token, Reason: "x", Level: "red", ExpectedVersion: st.GetVersion()})
		if status.Code(err) != codes.Aborted || rpcstatus.Reason(err) != master.ReasonVersionConflict || !strings.Contains(err.Error(), "version 3, you expected 2") {
			t.Fatalf("stale CAS = %v", err)
		}
		// Concurrent unconditional changes through two masters all land, each
		// with its own version.
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 20 {
			c := a.client
			if i%2 == 1 {
				c = b.client
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.SetFlex(context.Background(), &willowv1.SetFlexRequest{Token: token, Reason: "race", Actor: fmt.Sprint("oncall-", i),
					Knobs: map[string]string{"image_quality": fmt.Sprint(20 + i)}})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		cur, _ := a.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if cur.GetVersion() != 23 {
			t.Fatalf("version after 22 accepted changes = %d", cur.GetVersion())
		}
		h, err := a.client.FlexHistory(ctxT(t), &willowv1.FlexHistoryRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, e := range h.GetEntries() {
			if e.GetAccepted() {
				if seen[e.GetToVersion()] {
					t.Errorf("version %d committed twice", e.GetToVersion())
				}
				seen[e.GetToVersion()] = true
			}
		}
		if len(seen) != 23 {
			t.Errorf("%d accepted audit entries, want 23 (init + 22)", len(seen))
		}
	})
}

func TestFlexExpiry(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		set(t, m.client, &willowv1.SetFlexRequest{Level: "blue"})
		st := set(t, m.client, &willowv1.SetFlexRequest{Level: "red", ForMs: 300, Reason: "evening peak"})
		if st.GetExpiresAtUnixMs() == 0 {
			t.Fatalf("no expiry in %v", st)
		}
		// A later knob change without expiry survives the revert.
		set(t, m.client, &willowv1.SetFlexRequest{Knobs: map[string]string{"shed_ratio.comment": "0.1"}})
		deadline := time.Now().Add(3 * time.Second)
		for {
			cur, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if cur.GetLevel() == "blue" {
				if cur.GetKnobs()["shed_ratio.comment"] != "0.1" || cur.GetExpiresAtUnixMs() != 0 || cur.GetVersion() != 5 {
					t.Fatalf("after expiry: %v", cur)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("red did not expire: %v", cur)
			}
			time.Sleep(50 * time.Millisecond)
		}
		h, _ := m.client.FlexHistory(ctxT(t), &willowv1.FlexHistoryRequest{})
		if e := h.GetEntries()[0]; e.GetAction() != "expire" || !e.GetAccepted() || !strings.Contains(e.GetReason(), "evening peak") {
			t.Fatalf("latest audit = %v", e)
		}
	})
}

func TestFlexRestartRestores(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		r := rt
		rdb := r.Client(t)
		m := startMaster(t, rdb, "master-1")
		set(t, m.client, &willowv1.SetFlexRequest{Level: "yellow", ForMs: time.Hour.Milliseconds()})
		want := set(t, m.client, &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "33"}, Scope: "group:canary"})
		m.stop()
		m2 := startMaster(t, rdb, "master-1")
		got, err := m2.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetVersion() != want.GetVersion() || got.GetLevel() != "yellow" || got.GetScopes()[0].GetKnobs()["image_quality"] != "33" || got.GetExpiresAtUnixMs() != want.GetExpiresAtUnixMs() {
			t.Fatalf("restored %v, want %v", got, want)
		}
		// Rollback still knows the previous version.
		resp, err := m2.client.RollbackFlex(ctxT(t), &willowv1.RollbackFlexRequest{Token: token, Reason: "undo"})
		if err != nil || len(resp.GetFlex().GetScopes()) != 0 {
			t.Fatalf("rollback after restart: %v %v", resp, err)
		}
	})
}

func TestFlexAudit(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		set(t, m.client, &willowv1.SetFlexRequest{Level: "blue", Actor: "alice", Reason: "holiday eve"})
		_, err := m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Level: "red", Token: "guess", Actor: "mallory", Reason: "lol"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatal(err)
		}
		_, err = m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "5"}, Token: token, Actor: "bob", Reason: "tired"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatal(err)
		}
		_, err = m.client.RollbackFlex(ctxT(t), &willowv1.RollbackFlexRequest{Actor: "eve", Reason: "x"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatal(err)
		}
		h, err := m.client.FlexHistory(ctxT(t), &willowv1.FlexHistoryRequest{})
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			actor, action string
			accepted      bool
			errPart       string
		}
		// The actor is the authenticated identity (the legacy shared token
		// is the identity "oncall"), never the request's self-declared Actor.
		want := []row{{"unauthenticated", "rollback", false, "UNAUTHENTICATED no_credentials"}, {"oncall", "knob", false, "image_quality"},
			{"unauthenticated", "set", false, "UNAUTHENTICATED bad_credentials"}, {"oncall", "set", true, ""}, {"master", "init", true, ""}}
		if len(h.GetEntries()) != len(want) {
			t.Fatalf("history = %v", h.GetEntries())
		}
		for i, w := range want {
			e := h.GetEntries()[i]
			if e.GetActor() != w.actor || e.GetAction() != w.action || e.GetAccepted() != w.accepted || !strings.Contains(e.GetError(), w.errPart) || e.GetAtUnixMs() == 0 {
				t.Errorf("entry %d = %v, want %+v", i, e, w)
			}
		}
		if e := h.GetEntries()[3]; e.GetReason() != "holiday eve" || !strings.HasPrefix(e.GetFrom(), "v1 normal") || !strings.HasPrefix(e.GetTo(), "v2 blue") {
			t.Errorf("accepted entry = %v", e)
		}
	})
}

// watchLatency opens n Watch streams on each of clients, changes the flex
// state through via, and returns the slowest arrival of the new version.
func watchLatency(t *testing.T, via willowv1.MasterClient, clients []willowv1.MasterClient, n int) time.Duration {
	t.Helper()
	ctx := ctxT(t)
	cur, err := via.GetFlex(ctx, &willowv1.GetFlexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	target := cur.GetVersion() + 1
	var ready, done sync.WaitGroup
	arrived := make(chan time.Time, n*len(clients))
	for _, c := range clients {
		for range n {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				stream, err := c.Watch(ctx, &willowv1.WatchRequest{NodeId: "w"})
				if err != nil {
					t.Error(err)
					ready.Done()
					return
				}
				first, err := stream.Recv() // the current state comes first
				ready.Done()
				if err != nil || first.GetFlex().GetVersion() != cur.GetVersion() {
					t.Errorf("first event %v %v, want version %d", first, err, cur.GetVersion())
					return
				}
				for {
					ev, err := stream.Recv()
					if err != nil {
						t.Error(err)
						return
					}
					if ev.GetFlex().GetVersion() >= target {
						arrived <- time.Now()
						return
					}
				}
			}()
		}
	}
	ready.Wait()
	start := time.Now()
	set(t, via, &willowv1.SetFlexRequest{Level: "yellow"})
	done.Wait()
	close(arrived)
	var worst time.Duration
	count := 0
	for at := range arrived {
		count++
		worst = max(worst, at.Sub(start))
	}
	if count != n*len(clients) {
		t.Fatalf("%d of %d watchers got the change", count, n*len(clients))
	}
	return worst
}

func TestWatch20Streams(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		worst := watchLatency(t, m.client, []willowv1.MasterClient{m.client}, 20)
		t.Logf("20 watchers: slowest received the change %v after SetFlex was sent", worst)
		if worst > time.Second {
			t.Fatalf("slowest watcher took %v, want < 1s", worst)
		}
	})
}

func TestWatchAcrossMasters(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		a := startMaster(t, rdb, "master-a")
		b := startMaster(t, rdb, "master-b")
		worst := watchLatency(t, a.client, []willowv1.MasterClient{b.client}, 5)
		t.Logf("change on master A seen by watchers on master B after %v", worst)
		if worst > time.Second {
			t.Fatalf("slowest watcher on the other master took %v, want < 1s", worst)
		}
	})
}

func TestNodeReceivesFlex(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		n, err := node.New(node.Config{ID: "up-1", Role: "upload", Region: "a", MasterAddr: m.node.Addr(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go n.Run(ctx)
		set(t, m.client, &willowv1.SetFlexRequest{Level: "red", Scope: "region:a"})
		deadline := time.Now().Add(2 * time.Second)
		for n.Knobs().Level != "red" {
			if time.Now().After(deadline) {
				t.Fatalf("node knobs = %+v", n.Knobs())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if k := n.Knobs(); k.Retries || k.ShedRatio["prefetch"] != 0.8 {
			t.Fatalf("node knobs = %+v", k)
		}
	})
}

// TestWatchZstd follows the flex state over a zstd-compressed Watch stream
// (node.Zstd, klauspost/compress registered with gRPC).
func TestWatchZstd(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		conn, err := node.Dial(m.node.Addr(), nil, grpc.WithDefaultCallOptions(grpc.UseCompressor(node.Zstd)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := willowv1.NewMasterClient(conn)
		stream, err := c.Watch(ctxT(t), &willowv1.WatchRequest{NodeId: "z"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := stream.Recv(); err != nil || ev.GetFlex().GetVersion() != 1 {
			t.Fatalf("first event %v %v", ev, err)
		}
		set(t, c, &willowv1.SetFlexRequest{Level: "red", Reason: "zstd"})
		ev, err := stream.Recv()
		if err != nil || ev.GetFlex().GetLevel() != "red" || len(ev.GetFlex().GetKnobs()) < 10 {
			t.Fatalf("event %v %v", ev, err)
		}
	})
}

// TestWatchStreamsShareEncodedEvent: streams with and without zstd, on
// one connection each, all decode the same new state (each version's
// event is encoded once per wire format and shared, watch.go).
func TestWatchStreamsShareEncodedEvent(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		m := startMaster(t, rt.Client(t), "master-1")
		zconn, err := node.Dial(m.node.Addr(), nil, grpc.WithDefaultCallOptions(grpc.UseCompressor(node.Zstd)))
		if err != nil {
			t.Fatal(err)
		}
		defer zconn.Close()
		var streams []grpc.ServerStreamingClient[willowv1.WatchEvent]
		for i, c := range []willowv1.MasterClient{m.client, willowv1.NewMasterClient(zconn)} {
			for j := range 3 {
				st, err := c.Watch(ctxT(t), &willowv1.WatchRequest{NodeId: fmt.Sprintf("w-%d-%d", i, j)})
				if err != nil {
					t.Fatal(err)
				}
				if ev, err := st.Recv(); err != nil || ev.GetFlex().GetVersion() != 1 {
					t.Fatalf("first event %v %v", ev, err)
				}
				streams = append(streams, st)
			}
		}
		set(t, m.client, &willowv1.SetFlexRequest{Level: "red", Reason: "shared"})
		want, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range streams {
			ev, err := st.Recv()
			if err != nil || !proto.Equal(ev.GetFlex(), want) || len(ev.GetDrills()) != 0 {
				t.Fatalf("stream %d: event %v %v, want %v", i, ev, err, want)
			}
		}
	})
}

// TestFlexRedisDown: without Redis the master keeps serving the last state
// to readers and watchers and refuses changes with UNAVAILABLE, quickly.
func TestFlexRedisDown(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		r := rt
		m := startMaster(t, r.Client(t), "master-1")
		set(t, m.client, &willowv1.SetFlexRequest{Level: "blue"})
		stream, err := m.client.Watch(ctxT(t), &willowv1.WatchRequest{NodeId: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := stream.Recv(); err != nil || ev.GetFlex().GetLevel() != "blue" {
			t.Fatalf("first event %v %v", ev, err)
		}
		r.Kill()
		start := time.Now()
		st, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if err != nil || st.GetLevel() != "blue" {
			t.Fatalf("GetFlex with Redis down = %v %v", st, err)
		}
		t.Logf("GetFlex with Redis down: %v", time.Since(start))
		_, err = m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Token: token, Reason: "x", Level: "red"})
		if status.Code(err) != codes.Unavailable || rpcstatus.Reason(err) != redisconn.ReasonRedis {
			t.Fatalf("SetFlex with Redis down = %v", err)
		}
		t.Logf("GetFlex+SetFlex with Redis down: %v", time.Since(start))
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("calls with Redis down took %v", d)
		}
		// A new watcher still gets the last state.
		stream, err = m.client.Watch(ctxT(t), &willowv1.WatchRequest{NodeId: "w2"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := stream.Recv(); err != nil || ev.GetFlex().GetLevel() != "blue" {
			t.Fatalf("watch with Redis down: %v %v", ev, err)
		}
	})
}

func TestLevelsFile(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		dir := t.TempDir()
		tests := []struct {
			name, yaml, err string
		}{
			{"unknown knob", "levels:\n  normal: {}\n  red:\n    knobs: {turbo: 'on'}\n", `level "red": unknown knob "turbo"`},
			{"bad ratio", "levels:\n  normal: {}\n  red:\n    knobs: {shed_ratio.moments: '2'}\n", "shed_ratio.moments"},
			{"another business list", "businesses: [moments, games]\nlevels:\n  normal: {}\n", "flex's business table"},
			{"ok", "levels:\n  normal: {}\n  red:\n    knobs: {shed_ratio.comment: '1'}\n", ""},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				path := fmt.Sprintf("%s/levels-%d.yaml", dir, i)
				if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				n, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					t.Fatal(err)
				}
				s, err := master.New(master.Config{OncallToken: token, LevelsFile: path, KeyPrefix: fmt.Sprintf("lf%d:", i)}, master.Deps{Node: n, Redis: rdb})
				if tt.err != "" {
					if err == nil || !strings.Contains(err.Error(), tt.err) {
						t.Fatalf("New = %v, want error containing %q", err, tt.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				resp, err := s.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Token: token, Reason: "x", Level: "red"})
				if err != nil || resp.GetFlex().GetKnobs()["shed_ratio.comment"] != "1" {
					t.Fatalf("red from the custom file: %v %v", resp, err)
				}
			})
		}
	})
}
