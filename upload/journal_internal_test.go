package upload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"willow/internal/testenv"
	"willow/redisconn"
)

// TestRedisJournal runs the Redis journal on one server and on a real
// 3-master Redis Cluster: its sorted set and hash share a slot, so the
// transactions that change both work on a cluster.
func TestRedisJournal(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rdb := rt.Client(t)
		// Several front nodes' journals, spread over the cluster's slots.
		for node := range 4 {
			key := fmt.Sprintf("willow:upload:upload-a-%d:compress", node)
			j, err := newRedisJournal(rdb, key)
			if err != nil {
				t.Fatal(err)
			}
			if redisconn.Slot(j.key) != redisconn.Slot(j.jobs) {
				t.Fatalf("%s and %s in different slots", j.key, j.jobs)
			}
			now := time.UnixMilli(1_800_000_000_000)
			for i := range 5 {
				jb := job{Key: fmt.Sprintf("k%d", i), MediaID: fmt.Sprintf("s.a.n.%d", i), Business: "s", NextAt: now.Add(time.Duration(i-2) * time.Second).UnixMilli()}
				if err := j.Add(ctx, jb); err != nil {
					t.Fatalf("add: %v", err)
				}
			}
			// Replacing a job keeps one entry.
			if err := j.Add(ctx, job{Key: "k0", MediaID: "s.a.n.0", Business: "s", Attempts: 1, NextAt: now.Add(-3 * time.Second).UnixMilli()}); err != nil {
				t.Fatal(err)
			}
			if n, err := j.Len(ctx); err != nil || n != 5 {
				t.Fatalf("len %d, %v; want 5", n, err)
			}
			due, err := j.Due(ctx, now, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(due) != 3 || due[0].Key != "k0" || due[0].Attempts != 1 || due[1].MediaID != "s.a.n.1" {
				t.Fatalf("due %+v, want k0 (attempt 1), k1, k2", due)
			}
			if err := j.Done(ctx, "k0"); err != nil {
				t.Fatal(err)
			}
			if err := j.Done(ctx, "missing"); err != nil {
				t.Fatalf("done of a missing job: %v", err)
			}
			if due, _ := j.Due(ctx, now, 10); len(due) != 2 {
				t.Fatalf("after done: %d due, want 2", len(due))
			}
			if n, _ := rdb.HLen(ctx, j.jobs).Result(); n != 4 {
				t.Fatalf("jobs hash holds %d, want 4", n)
			}
		}
	})
	if _, err := newRedisJournal(nil, "a}b"); err == nil {
		t.Error("a journal key that cannot share a slot was accepted")
	}
}
