package master

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/internal/testenv"
	willowv1 "willow/proto/willow/v1"
)

// A heartbeat whose binding lapsed (its node was late by MissedAfter)
// takes the free binding back instead of sending the node through
// Register; a binding another live credential holds still refuses it.
func TestHeartbeatRebindsLapsedBinding(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	clock := &testClock{t: time.Unix(1_800_000_000, 0)}
	s := newSyncMaster(t, "master-1", rdb, clock)
	info := &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:7001"}
	as := func(instance string) context.Context {
		return auth.NewContext(context.Background(), auth.Caller{Class: auth.Node, NodeID: info.Id, NodeRole: info.Role,
			Credential: "secret", Instance: instance})
	}
	ctx := as("one")
	if _, err := s.Register(ctx, &willowv1.RegisterRequest{Node: info}); err != nil {
		t.Fatal(err)
	}
	beat := func(ctx context.Context) (*willowv1.HeartbeatResponse, error) {
		return s.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1}})
	}
	if r, err := beat(ctx); err != nil || r.GetReregister() {
		t.Fatalf("heartbeat = %v, %v; want ok", r, err)
	}
	// The binding lapses (deleted here: Redis expires it after MissedAfter).
	if err := rdb.Del(context.Background(), s.bindKey(info.Id)).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := beat(ctx); err != nil || r.GetReregister() {
		t.Fatalf("heartbeat after the binding lapsed = %v, %v; want ok without re-registering", r, err)
	}
	got, err := rdb.Get(context.Background(), s.bindKey(info.Id)).Result()
	if err != nil || got != "secret/one" {
		t.Fatalf("binding = %q, %v; want it taken back by secret/one", got, err)
	}
	if ttl := rdb.PTTL(context.Background(), s.bindKey(info.Id)).Val(); ttl <= 0 || ttl > s.cfg.MissedAfter {
		t.Fatalf("binding TTL %v, want (0, %v]", ttl, s.cfg.MissedAfter)
	}
	// Another process with the same ID while the binding lives: refused.
	_, err = beat(as("two"))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("heartbeat of a second instance = %v, want PERMISSION_DENIED", err)
	}
}

// validID accepts what `^[a-z0-9][a-z0-9-]*$` did.
func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"upload-a-1": true, "a": true, "0-": true, "x--y": true,
		"": false, "-a": false, "Upload": false, "a_b": false, "a.b": false, "a b": false, "é": false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}
