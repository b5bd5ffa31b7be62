package master

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"willow/auth"
	"willow/flex"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

var _ flexStore = (*memFlexStore)(nil)

// memFlexStore is an in-memory flexStore: the document goes through JSON
// as it does in Redis, so no two holders share maps.
type memFlexStore struct {
	mu    sync.Mutex // guards the fields below
	doc   []byte
	ver   int64
	audit []string // newest first
	subs  []chan struct{}
	// fail, when set, fails every call.
	fail error
	// beforeSwap, when set, runs before Swap compares the version: a
	// concurrent writer.
	beforeSwap func(m *memFlexStore)
}

func (m *memFlexStore) Load(context.Context) (flexDoc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d flexDoc
	if m.fail != nil {
		return d, m.fail
	}
	if m.doc == nil {
		return d, nil
	}
	err := json.Unmarshal(m.doc, &d)
	return d, err
}

func (m *memFlexStore) Swap(_ context.Context, expect int64, next flexDoc, audit []byte) (bool, error) {
	if m.beforeSwap != nil {
		f := m.beforeSwap
		m.beforeSwap = nil
		f(m)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return false, m.fail
	}
	if m.ver != expect {
		return false, nil
	}
	b, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	m.doc, m.ver = b, next.rev()
	m.audit = append([]string{string(audit)}, m.audit...)
	for _, c := range m.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return true, nil
}

// bump commits a change of image_quality as another master would.
func (m *memFlexStore) bump(t *testing.T) {
	d, err := m.Load(context.Background())
	if err != nil {
		t.Error(err)
	}
	expect := d.rev()
	d.Version++
	d.Rev = max(d.Rev, d.Version-1) + 1
	d.Setting.Global.Overrides = map[string]string{"image_quality": "33"}
	if ok, err := m.Swap(context.Background(), expect, d, []byte(`{"actor":"other-master","action":"knob","accepted":true}`)); !ok || err != nil {
		t.Errorf("other master's swap: %v %v", ok, err)
	}
}

func (m *memFlexStore) Audit(_ context.Context, entry []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.audit = append([]string{string(entry)}, m.audit...)
	return nil
}

func (m *memFlexStore) History(_ context.Context, limit int64) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	return append([]string(nil), m.audit[:min(int64(len(m.audit)), limit)]...), nil
}

func (m *memFlexStore) Changes(context.Context) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(chan struct{}, 1)
	m.subs = append(m.subs, c)
	return c
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newFlexServer builds a master that has only its flex part, on st.
func newFlexServer(t *testing.T, st flexStore, clock *fakeClock) *Server {
	t.Helper()
	s := &Server{cfg: Config{OncallToken: "t"}, now: clock.Now, log: slog.New(slog.DiscardHandler)}
	if err := s.cfg.applyDefaults(); err != nil {
		t.Fatal(err)
	}
	// Token "t" is the on-call identity named "oncall" (operators' legacy form).
	ops, err := operators(nil, nil, s.cfg.OncallToken)
	if err != nil {
		t.Fatal(err)
	}
	s.ops = ops
	if err := s.initFlex(st, prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	return s
}

func history(t *testing.T, s *Server) []*willowv1.AuditEntry {
	t.Helper()
	h, err := s.FlexHistory(context.Background(), &willowv1.FlexHistoryRequest{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return h.GetEntries()
}

func TestFlexHandlersWithoutRedis(t *testing.T) {
	ctx := context.Background()
	st := &memFlexStore{}
	clock := &fakeClock{t: t0}
	s := newFlexServer(t, st, clock)

	cur, err := s.GetFlex(ctx, &willowv1.GetFlexRequest{})
	if err != nil || cur.GetVersion() != 1 || cur.GetLevel() != "normal" {
		t.Fatalf("bootstrap: %v %v", cur, err)
	}
	refused := []struct {
		name   string
		req    *willowv1.SetFlexRequest
		code   codes.Code
		reason string
	}{
		{"no token", &willowv1.SetFlexRequest{Level: "red", Reason: "x"}, codes.Unauthenticated, auth.ReasonNoCredentials},
		{"wrong token", &willowv1.SetFlexRequest{Level: "red", Reason: "x", Token: "nope"}, codes.Unauthenticated, auth.ReasonBadCredentials},
		{"bad knob", &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "5"}, Reason: "x", Token: "t"}, codes.InvalidArgument, flex.ReasonInvalidKnob},
		{"stale version", &willowv1.SetFlexRequest{Level: "red", Reason: "x", Token: "t", ExpectedVersion: 7}, codes.Aborted, ReasonVersionConflict},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.SetFlex(ctx, tt.req)
			if status.Code(err) != tt.code || rpcstatus.Reason(err) != tt.reason {
				t.Fatalf("err = %v, want %v %s", err, tt.code, tt.reason)
			}
		})
	}

	resp, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Level: "red", Reason: "peak", Token: "t", Actor: "alice", ExpectedVersion: 1})
	if err != nil || resp.GetFlex().GetVersion() != 2 || resp.GetFlex().GetLevel() != "red" || resp.GetPrevious().GetLevel() != "normal" {
		t.Fatalf("set red: %v %v", resp, err)
	}
	rb, err := s.RollbackFlex(ctx, &willowv1.RollbackFlexRequest{Token: "t", Actor: "bob", Reason: "too harsh"})
	if err != nil || rb.GetFlex().GetVersion() != 3 || rb.GetFlex().GetLevel() != "normal" {
		t.Fatalf("rollback: %v %v", rb, err)
	}
	var got []string
	for _, e := range history(t, s) {
		got = append(got, e.GetAction()+"/"+e.GetActor()+"/"+map[bool]string{true: "ok", false: "refused"}[e.GetAccepted()])
	}
	// The actor is the authenticated identity, never the request's self-
	// declared Actor (alice, bob).
	want := []string{"rollback/oncall/ok", "set/oncall/ok", "set/oncall/refused", "knob/oncall/refused",
		"set/unauthenticated/refused", "set/unauthenticated/refused", "init/master/ok"}
	if len(got) != len(want) {
		t.Fatalf("audit = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("audit = %v, want %v", got, want)
		}
	}
}

func TestFlexExpiryOnInjectedClock(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: t0}
	s := newFlexServer(t, &memFlexStore{}, clock)
	resp, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Level: "red", Reason: "evening", Token: "t", ForMs: 1000})
	if err != nil || resp.GetFlex().GetExpiresAtUnixMs() != t0.Add(time.Second).UnixMilli() {
		t.Fatalf("set: %v %v", resp, err)
	}
	clock.Add(999 * time.Millisecond)
	if err := s.expireDue(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.flexSnapshot(); st.GetLevel() != "red" || st.GetVersion() != 2 {
		t.Fatalf("expired early: %v", st)
	}
	clock.Add(time.Millisecond)
	if err := s.expireDue(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.flexSnapshot()
	if st.GetLevel() != "normal" || st.GetVersion() != 3 || st.GetExpiresAtUnixMs() != 0 || st.GetActor() != "master" {
		t.Fatalf("after expiry: %v", st)
	}
	if e := history(t, s)[0]; e.GetAction() != "expire" || e.GetAtUnixMs() != clock.Now().UnixMilli() {
		t.Fatalf("audit head = %v", e)
	}
}

func TestFlexCommitRetriesAfterAnotherMaster(t *testing.T) {
	ctx := context.Background()
	st := &memFlexStore{}
	s := newFlexServer(t, st, &fakeClock{t: t0})
	st.beforeSwap = func(m *memFlexStore) { m.bump(t) }
	resp, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Knobs: map[string]string{"video_bitrate_kbps": "900"}, Reason: "x", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 is the other master's; ours is reapplied on top of it.
	if k := resp.GetFlex().GetKnobs(); resp.GetFlex().GetVersion() != 3 || k["image_quality"] != "33" || k["video_bitrate_kbps"] != "900" {
		t.Fatalf("after the race: %v", resp.GetFlex())
	}
}

func TestFlexStoreDown(t *testing.T) {
	ctx := context.Background()
	st := &memFlexStore{}
	s := newFlexServer(t, st, &fakeClock{t: t0})
	st.mu.Lock()
	st.fail = errors.New("connection refused")
	st.mu.Unlock()
	if cur, err := s.GetFlex(ctx, &willowv1.GetFlexRequest{}); err != nil || cur.GetVersion() != 1 {
		t.Fatalf("GetFlex with the store down serves the local copy: %v %v", cur, err)
	}
	_, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Level: "red", Reason: "x", Token: "t"})
	if status.Code(err) != codes.Unavailable || rpcstatus.Reason(err) != redisconn.ReasonRedis {
		t.Fatalf("SetFlex with the store down: %v", err)
	}
	if _, err := s.FlexHistory(ctx, &willowv1.FlexHistoryRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("FlexHistory with the store down: %v", err)
	}
	// The audit entries are protojson, as FlexHistory reads them.
	st.fail = nil
	for _, raw := range st.audit {
		if err := protojson.Unmarshal([]byte(raw), &willowv1.AuditEntry{}); err != nil {
			t.Fatalf("audit entry %q: %v", raw, err)
		}
	}
}
