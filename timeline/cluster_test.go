package timeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/node"
	"willow/timeline"
)

// TestClusterSpreadsUsers publishes to followers spread over every
// master of a real Redis Cluster, with user IDs holding braces, after
// the nodes forgot the scripts (SCRIPT FLUSH: a restarted node), and
// releases them all.
func TestClusterSpreadsUsers(t *testing.T) {
	rc := testenv.SharedRedisCluster(t)
	rdb := rc.Client(t)
	v := start(t, rdb, timeline.Config{FanoutBatch: 16, ReleaseBatch: 16})
	ctx := ctxT(t)
	const n = 120
	followers := make([]string, n)
	for i := range followers {
		followers[i] = fmt.Sprintf("u%d", i)
	}
	followers[0], followers[1], followers[2] = "a{b}c", "}{", "%7B"
	for _, f := range followers {
		follow(t, v.c, f, "star")
	}
	v.knobs(0.5, 0)
	flushScripts := func() {
		t.Helper()
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
	}
	flushScripts()
	r := publish(t, v.c, "star", "p1")
	if got := r.GetDelivered() + r.GetHeld(); got != n+1 || r.GetHeld() == 0 {
		t.Fatalf("publish: %v, want %d in all, some held", r, n+1)
	}
	publish(t, v.c, "star", "p2")
	// Every master holds some of the inboxes.
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "willow:tl:in:*").Result()
		if err == nil && len(keys) == 0 {
			err = fmt.Errorf("master %s holds no inbox", m.Options().Addr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	flushScripts()
	v.knobs(0, 1000)
	waitDrained(t, v.c, 10*time.Second)
	for _, f := range followers {
		items, _ := pollAll(t, v.c, f, "", 10)
		if got := fmt.Sprint(posts(items)); got != "[star/p1 star/p2]" {
			t.Errorf("%s sees %s", f, got)
		}
	}
	if st := stats(t, v.c); st.GetHeldUsers() != 0 || st.GetReleasedTotal() != int64(r.GetHeld())*2 {
		t.Errorf("stats after release: %v (held %d of each post)", st, r.GetHeld())
	}
}

func TestKeyPrefixWithBraces(t *testing.T) {
	n, err := node.New(node.Config{ID: "tl-brace", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := timeline.New(timeline.Config{KeyPrefix: "{tl}:"}, timeline.Deps{Node: n, Redis: rdb}); err == nil {
		t.Error("a KeyPrefix holding braces was accepted")
	}
}

// TestClusterStaleSlotMap: when the publish groups users by a slot map
// that is wrong (here: every slot on one master, as after a resharding
// the client has not seen), each per-master script fails at a key its
// node does not hold, and the publish redoes those users one slot a
// script: every follower still gets each post once, held or delivered,
// and the release delivers them in order.
func TestClusterStaleSlotMap(t *testing.T) {
	rc := testenv.SharedRedisCluster(t)
	rdb := rc.Client(t)
	v := start(t, rdb, timeline.Config{FanoutBatch: 16, ReleaseBatch: 16})
	var failed atomic.Int64
	timeline.SetNodeOf(v.s, func(context.Context, string) string { failed.Add(1); return "one" })
	const n = 90
	followers := make([]string, n)
	for i := range followers {
		followers[i] = fmt.Sprintf("s%d", i)
		follow(t, v.c, followers[i], "star")
	}
	v.knobs(0.5, 0)
	r1 := publish(t, v.c, "star", "p1")
	if got := r1.GetDelivered() + r1.GetHeld(); got != n+1 || r1.GetHeld() == 0 {
		t.Fatalf("p1: %v, want %d in all, some held", r1, n+1)
	}
	if failed.Load() == 0 {
		t.Fatal("the slot map was not asked")
	}
	// The same post again (its record lost its outcome: a retry) finds
	// everything done.
	if err := rdb.HDel(ctxT(t), "willow:tl:p:star p1", "done").Err(); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v.c, "star", "p1"); r.GetDelivered() != r1.GetDelivered() || r.GetHeld() != r1.GetHeld() {
		t.Fatalf("retried p1: %v, first %v", r, r1)
	}
	v.knobs(0, 0)
	publish(t, v.c, "star", "p2")
	v.knobs(0, 1000)
	waitDrained(t, v.c, 10*time.Second)
	for _, f := range followers {
		if items, _ := pollAll(t, v.c, f, "", 10); fmt.Sprint(posts(items)) != "[star/p1 star/p2]" {
			t.Errorf("%s sees %s", f, posts(items))
		}
	}
}
