package shedding_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"willow/flex"
	"willow/rpcstatus"
	"willow/shedding"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  shedding.Config
	}{
		{"negative window", shedding.Config{Window: -time.Second}},
		{"negative threshold", shedding.Config{QueueThreshold: -1}},
		{"negative max in flight", shedding.Config{MaxInFlight: -1}},
		{"priority zero", shedding.Config{Priorities: map[string]int{"moments": 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := shedding.New(tt.cfg, shedding.Deps{}); !errors.Is(err, shedding.ErrConfig) {
				t.Fatalf("New: got %v, want ErrConfig", err)
			}
		})
	}
}

func TestShedRatioAccuracy(t *testing.T) {
	const n = 10000
	for _, ratio := range []float64{0, 0.05, 0.3, 0.5, 0.9, 1} {
		t.Run(strconv.FormatFloat(ratio, 'f', -1, 64), func(t *testing.T) {
			s, err := shedding.New(shedding.Config{}, shedding.Deps{Knobs: knobs(map[string]float64{"comment": ratio})})
			if err != nil {
				t.Fatal(err)
			}
			rejected := 0
			for i := range n {
				reason, ok := s.Admit("comment", "user-"+strconv.Itoa(i))
				if !ok {
					if reason != shedding.ReasonShedRatio {
						t.Fatalf("reason %q, want %q", reason, shedding.ReasonShedRatio)
					}
					rejected++
				}
				if _, ok := s.Admit("moments", "user-"+strconv.Itoa(i)); !ok {
					t.Fatal("moments (no shed_ratio) rejected")
				}
			}
			if got := float64(rejected) / n; math.Abs(got-ratio) > 0.02 {
				t.Errorf("rejected %.4f of comment requests, want %.2f ± 0.02", got, ratio)
			}
		})
	}
}

func TestSameUserSameFateWithinHour(t *testing.T) {
	clk := newClock() // 10:05
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Now: clk.Now, Knobs: knobs(map[string]float64{"avatar": 0.5})})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	decide := func() []bool {
		out := make([]bool, n)
		for i := range out {
			_, out[i] = s.Admit("avatar", fmt.Sprintf("u%d", i))
		}
		return out
	}
	first := decide()
	for i := range 5 { // repeated asks within the hour
		clk.Advance(10 * time.Minute) // up to 10:55
		again := decide()
		for u := range again {
			if again[u] != first[u] {
				t.Fatalf("round %d: user u%d decision changed within the hour", i, u)
			}
		}
	}
	clk.Advance(10 * time.Minute) // 11:05
	next := decide()
	changed := 0
	for u := range next {
		if next[u] != first[u] {
			changed++
		}
	}
	if changed < n/5 {
		t.Errorf("next hour: %d of %d users changed fate, want many (about half)", changed, n)
	}
	if p1, p2 := shedding.UserPriority(nil, "alice", clk.Now()), shedding.UserPriority(nil, "alice", clk.Now().Add(30*time.Minute)); p1 != p2 && clk.Now().Add(30*time.Minute).Hour() == clk.Now().Hour() {
		t.Errorf("UserPriority changed within the hour: %d, %d", p1, p2)
	}
}

func TestDeferredExemptAndStreams(t *testing.T) {
	s, err := shedding.New(shedding.Config{
		Methods: shedding.Classes{mBegin: shedding.Deferred, mHealth: shedding.Exempt},
	}, shedding.Deps{Knobs: knobs(map[string]float64{"avatar": 1})})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{}
	cc := serve(t, s, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tests := []struct {
		name       string
		method     string
		business   string
		wantCode   codes.Code
		wantReason string // error reason, or WouldShed's answer when OK
		wantLevel  bool   // header willow-admit-level present
	}{
		// Never overloaded: no level to tell (TestLevelTravelsAndClientDropsEarly
		// covers the header while and after the level is cut).
		{"shed by ratio", mWork, "avatar", codes.ResourceExhausted, shedding.ReasonShedRatio, false},
		{"admitted", mWork, "moments", codes.OK, "", false},
		{"deferred sees WouldShed", mBegin, "avatar", codes.OK, shedding.ReasonShedRatio, false},
		{"deferred admitted", mBegin, "moments", codes.OK, "", false},
		{"exempt passes", mHealth, "avatar", codes.OK, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr metadata.MD
			got, err := call(ctx, cc, tt.method, tt.business, "bob", grpc.Header(&hdr))
			if code := status.Code(err); code != tt.wantCode {
				t.Fatalf("code %v (%v), want %v", code, err, tt.wantCode)
			}
			if err != nil {
				got = rpcstatus.Reason(err)
				if rpcstatus.RetryAfter(err) <= 0 {
					t.Errorf("no retry-after hint in %v", err)
				}
			}
			if got != tt.wantReason {
				t.Errorf("reason %q, want %q", got, tt.wantReason)
			}
			lv := hdr.Get(shedding.HeaderAdmitLevel)
			if tt.wantLevel != (len(lv) > 0) {
				t.Errorf("header %s = %v, want present=%v", shedding.HeaderAdmitLevel, lv, tt.wantLevel)
			}
			if len(lv) > 0 && lv[0] != strconv.Itoa(s.MaxLevel()) {
				t.Errorf("level %s, want %d (nothing overloaded)", lv[0], s.MaxLevel())
			}
		})
	}
	t.Run("stream shed by ratio", func(t *testing.T) {
		err := watch(ctx, cc, "avatar", "bob")
		if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != shedding.ReasonShedRatio {
			t.Fatalf("got %v, want RESOURCE_EXHAUSTED shed_ratio", err)
		}
	})
	t.Run("stream admitted", func(t *testing.T) {
		if err := watch(ctx, cc, "moments", "bob"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLevelTravelsAndClientDropsEarly drives one overloaded window by hand
// (fake clock): a request waits 100 ms for the only slot, the level is cut
// below it, the level travels back in the header and the client interceptor
// then drops what the callee would reject, without calling it, until the
// level expires.
func TestLevelTravelsAndClientDropsEarly(t *testing.T) {
	clk := newClock()
	s, err := shedding.New(shedding.Config{MaxInFlight: 1, MaxWait: 5 * time.Second, Methods: shedding.Classes{mHealth: shedding.Exempt}}, shedding.Deps{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{block: make(chan struct{})}
	cc := serve(t, s, ts,
		grpc.WithChainUnaryInterceptor(shedding.UnaryClientInterceptor(shedding.WithClock(clk.Now))),
		grpc.WithChainStreamInterceptor(shedding.StreamClientInterceptor(shedding.WithClock(clk.Now))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(1)
	go func() { defer wg.Done(); _, err := call(ctx, cc, mWork, "moments", "alice"); errs <- err }()
	for ts.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _, err := call(ctx, cc, mWork, "prefetch", "bob"); errs <- err }()
	for s.Waiting() == 0 { // until bob waits for the slot
		time.Sleep(time.Millisecond)
	}
	clk.Advance(100 * time.Millisecond)
	close(ts.block) // alice finishes, bob gets the slot; later calls pass
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("warm-up call: %v", err)
		}
	}

	clk.Advance(time.Second) // the window is over: next request rolls it
	var hdr metadata.MD
	if _, err := call(ctx, cc, mWork, "moments", "alice", grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if q := s.QueueMs(); q != 50 {
		t.Errorf("QueueMs = %v, want 50 (0 and 100 ms waits)", q)
	}
	level := s.Level()
	bobKey := 3*shedding.UserLevels + shedding.UserPriority(nil, "bob", clk.Now())
	if level != bobKey-1 {
		t.Errorf("level %d, want %d (just below bob's key, cutting 1 of 2 requests)", level, bobKey-1)
	}
	if got := hdr.Get(shedding.HeaderAdmitLevel); len(got) != 1 || got[0] != strconv.Itoa(level) {
		t.Errorf("header level %v, want %d", got, level)
	}

	before := ts.calls.Load()
	_, err = call(ctx, cc, mWork, "spam", "carol") // unknown business: below every level
	if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != shedding.ReasonOverload {
		t.Fatalf("unknown business: got %v, want RESOURCE_EXHAUSTED overload dropped early", err)
	}
	if ts.calls.Load() != before {
		t.Fatal("dropped request reached the server")
	}
	if _, err := call(ctx, cc, mHealth, "spam", "carol"); err != nil {
		t.Errorf("a method that never sent a level was dropped: %v", err)
	}
	if _, err := call(ctx, cc, mWork, "moments", "alice"); err != nil {
		t.Errorf("top priority dropped: %v", err)
	}
	// Streams learn the level from their header too.
	if err := watch(ctx, cc, "moments", "alice"); err != nil {
		t.Fatalf("stream: %v", err)
	}
	before = ts.calls.Load()
	err = watch(ctx, cc, "spam", "carol")
	if rpcstatus.Reason(err) != shedding.ReasonOverload || ts.calls.Load() != before {
		t.Fatalf("stream of unknown business: got %v (server calls %d -> %d), want dropped early", err, before, ts.calls.Load())
	}

	clk.Advance(3 * time.Second) // level expired in the client; calm window in the server
	hdr = nil
	if _, err := call(ctx, cc, mWork, "spam", "carol", grpc.Header(&hdr)); err != nil {
		t.Errorf("after the level expired and the callee recovered: %v", err)
	}
	if got := s.Level(); got != s.MaxLevel() {
		t.Errorf("level %d after a calm window with no demand above it, want %d", got, s.MaxLevel())
	}
	// Back at the top, the callee keeps telling it for the level TTL, so a
	// client that learned the cut hears the recovery...
	if got := hdr.Get(shedding.HeaderAdmitLevel); len(got) != 1 || got[0] != strconv.Itoa(s.MaxLevel()) {
		t.Errorf("header level %v just after recovery, want %d", got, s.MaxLevel())
	}
	// ...and then stops: setting the header is most of the interceptor's cost.
	clk.Advance(shedding.DefaultLevelTTL + time.Millisecond)
	hdr = nil
	if _, err := call(ctx, cc, mWork, "spam", "carol", grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get(shedding.HeaderAdmitLevel); len(got) != 0 {
		t.Errorf("header level %v a level TTL after recovery, want none", got)
	}
}

// TestClientPropagatesRequestContext: a service calling another while
// serving a request passes the incoming business and user on, so the
// callee ranks the call as the original user's.
func TestClientPropagatesRequestContext(t *testing.T) {
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Knobs: knobs(map[string]float64{"moments": 1})})
	if err != nil {
		t.Fatal(err)
	}
	cc := serve(t, s, &testServer{},
		grpc.WithChainUnaryInterceptor(shedding.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(shedding.StreamClientInterceptor()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// As if inside a handler serving a moments request of user dave.
	in := metadata.NewIncomingContext(ctx, metadata.Pairs(shedding.MDBusiness, "moments", shedding.MDUser, "dave"))
	err = cc.Invoke(in, mWork, wrapperspb.String("x"), new(wrapperspb.StringValue))
	if rpcstatus.Reason(err) != shedding.ReasonShedRatio {
		t.Fatalf("unary: got %v, want the callee to see business moments and shed it", err)
	}
	cs, err := cc.NewStream(in, &testDesc.Streams[0], mWatch)
	if err == nil {
		_ = cs.SendMsg(wrapperspb.String("x"))
		_ = cs.CloseSend()
		err = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if rpcstatus.Reason(err) != shedding.ReasonShedRatio {
		t.Fatalf("stream: got %v, want the callee to see business moments and shed it", err)
	}
	// The caller's own request context wins over the incoming one.
	if _, err := call(in, cc, mWork, "comment", "dave"); err != nil {
		t.Fatalf("explicit WithRequest: %v", err)
	}
}

func TestKnobChangesApply(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	ratio := 0.0
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Now: clk.Now, Knobs: func() flex.Knobs {
		mu.Lock()
		defer mu.Unlock()
		return knobs(map[string]float64{"avatar": ratio})()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Admit("avatar", "erin"); !ok {
		t.Fatal("shed with ratio 0")
	}
	mu.Lock()
	ratio = 1
	mu.Unlock()
	clk.Advance(shedding.KnobRefresh)
	if r, ok := s.Admit("avatar", "erin"); ok || r != shedding.ReasonShedRatio {
		t.Fatalf("after KnobRefresh with ratio 1: got (%q, %v), want shed_ratio", r, ok)
	}
	s.ApplyKnobs(knobs(map[string]float64{"avatar": 0})())
	if _, ok := s.Admit("avatar", "erin"); !ok {
		t.Fatal("ApplyKnobs(ratio 0) not in force at once")
	}
}

// TestQueueHistogram: willow_shedding_queue_seconds counts every admitted
// request's slot wait (and willow_shedding_admitted_total every admitted
// request), the calls that found a free slot (0 s, counted
// apart on the hot path) in every bucket, a real wait in its bucket and
// the sum, as a plain histogram would.
func TestQueueHistogram(t *testing.T) {
	clk := newClock()
	reg := prometheus.NewRegistry()
	s, err := shedding.New(shedding.Config{MaxInFlight: 1, MaxWait: 5 * time.Second},
		shedding.Deps{Now: clk.Now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(shedding.MDBusiness, "moments", shedding.MDUser, "alice"))
	for range 3 {
		_, release, err := s.GateCall(ctx, mWork, nil)
		if err != nil || release == nil {
			t.Fatalf("GateCall: release %v, err %v", release != nil, err)
		}
		release()
	}
	_, hold, err := s.GateCall(ctx, mWork, nil) // a 4th zero wait, keeps the slot
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, release, err := s.GateCall(ctx, mWork, nil)
		if release != nil {
			release()
		}
		done <- err
	}()
	for s.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(3 * time.Millisecond)
	hold()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() == "willow_shedding_admitted_total" {
			for _, m := range mf.GetMetric() {
				want := 0.0
				if strings.Contains(m.GetLabel()[0].GetValue(), "moments") {
					want = 5 // four on a free slot, one after a wait
				}
				if got := m.GetCounter().GetValue(); got != want {
					t.Errorf("admitted_total{business=%q} %v, want %v", m.GetLabel()[0].GetValue(), got, want)
				}
			}
		}
		if mf.GetName() != "willow_shedding_queue_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if strings.Contains(m.GetLabel()[0].GetValue(), "moments") {
				h = m.GetHistogram()
			} else if c := m.GetHistogram().GetSampleCount(); c != 0 {
				t.Errorf("business %q: %d waits, want 0", m.GetLabel()[0].GetValue(), c)
			}
		}
	}
	if h == nil {
		t.Fatal("no willow_shedding_queue_seconds series for moments")
	}
	if h.GetSampleCount() != 5 || math.Abs(h.GetSampleSum()-0.003) > 1e-9 {
		t.Errorf("count %d sum %v, want 5 and 0.003", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		want := uint64(4)
		if b.GetUpperBound() >= 0.005 {
			want = 5
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// TestGateCallAtTakesCallersClock: GateCallAt decides at the time its
// caller read (here the hour that puts a user in the shed ratio), unless
// the shedder has a clock of its own (Deps.Now), which it then reads.
func TestGateCallAtTakesCallersClock(t *testing.T) {
	t0 := time.Now()
	t1 := t0.Add(2 * time.Hour)
	h := shedding.NewUserHash(nil)
	user := ""
	for i := 0; user == "" && i < 1000; i++ {
		u := "user-" + strconv.Itoa(i)
		if !h.InRatio(u, t0, 0.5) && h.InRatio(u, t1, 0.5) {
			user = u
		}
	}
	if user == "" {
		t.Fatal("no user in the ratio at t1 only")
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(shedding.MDBusiness, "comment", shedding.MDUser, user))
	gate := func(s *shedding.Shedder, at time.Time) error {
		_, release, err := s.GateCallAt(ctx, mWork, nil, at)
		if release != nil {
			release()
		}
		return err
	}
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Knobs: knobs(map[string]float64{"comment": 0.5})})
	if err != nil {
		t.Fatal(err)
	}
	if err := gate(s, t0); err != nil {
		t.Errorf("at t0: %v, want admitted", err)
	}
	if err := gate(s, t1); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("at t1: %v, want RESOURCE_EXHAUSTED (shed_ratio)", err)
	}
	own, err := shedding.New(shedding.Config{}, shedding.Deps{Knobs: knobs(map[string]float64{"comment": 0.5}),
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := gate(own, t1); err != nil {
		t.Errorf("Deps.Now at t0, caller's t1: %v, want admitted (the shedder's clock)", err)
	}
}
