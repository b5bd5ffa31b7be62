package timeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/shedding"
	"willow/timeline"
)

// TestInboxSequenceAndTrim: an inbox written before the slot's sequence
// counter existed (small scores, a cursor handed out on them) gets new
// items after that cursor; a follower receiving three times MaxInbox
// posts keeps the newest, in order, trimmed back to MaxInbox at least
// once every 16 deliveries, and a poll shows exactly the newest MaxInbox.
func TestInboxSequenceAndTrim(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		const max = 20
		v := start(t, rdb, timeline.Config{MaxInbox: max})
		follow(t, v.c, "fan", "star")
		inbox := "willow:tl:in:{fan}"
		if err := rdb.ZAdd(ctxT(t), inbox, redis.Z{Score: 5, Member: "old p0"}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, cur := pollAll(t, v.c, "fan", "", 10); cur != "5" {
			t.Fatalf("cursor on the old item %q, want 5", cur)
		}
		for p := 1; p <= 3*max; p++ {
			publish(t, v.c, "star", fmt.Sprintf("p%d", p))
			if n := rdb.ZCard(ctxT(t), inbox).Val(); n > max+15 {
				t.Fatalf("after p%d the inbox holds %d items, MaxInbox %d", p, n, max)
			}
		}
		// A poll shows the newest MaxInbox, whatever the trim left.
		items, _ := pollAll(t, v.c, "fan", "5", 7)
		if len(items) != max {
			t.Fatalf("%d items after the old cursor, want %d", len(items), max)
		}
		for i, it := range items {
			if want := fmt.Sprintf("p%d", 3*max-len(items)+1+i); it.GetPostId() != want {
				t.Fatalf("item %d is %s, want %s (the newest, in order)", i, it.GetPostId(), want)
			}
		}
	})
}

// TestBacklogAmongMany: in one fan-out batch, only the follower with a
// backlog gets the new post held behind it; the others get it at once.
func TestBacklogAmongMany(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		var held string
		var free []string
		for i := 0; len(free) < 120 || held == ""; i++ {
			u := fmt.Sprintf("m%d", i)
			if shedding.NewUserHash(nil).InRatio(u, time.Now(), 0.5) {
				if held != "" {
					continue
				}
				held = u
			} else {
				free = append(free, u)
			}
			follow(t, v.c, u, "a")
		}
		v.knobs(0.5, 0)
		if r := publish(t, v.c, "a", "p1"); r.GetHeld() != 1 {
			t.Fatalf("p1: %v, want 1 held", r)
		}
		v.knobs(0, 0)
		if r := publish(t, v.c, "a", "p2"); r.GetHeld() != 1 || r.GetDelivered() != int32(len(free))+1 {
			t.Fatalf("p2: %v, want 1 held behind the backlog, %d delivered", r, len(free)+1)
		}
		for _, u := range free[:3] {
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != "[a/p1 a/p2]" {
				t.Errorf("%s sees %s", u, posts(items))
			}
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		if items, _ := pollAll(t, v.c, held, "", 10); fmt.Sprint(posts(items)) != "[a/p1 a/p2]" {
			t.Errorf("%s sees %s after the release", held, posts(items))
		}
	})
}

// TestRetriedPublishAfterRatioChange: a publish that died after
// delivering to some followers (its post record left without an
// outcome) is retried after the delay ratio rose to 1. The followers it
// reached keep their one item (not held again); the others are held, and
// after the release everyone sees the post once. A first publish skips
// that inbox check (publishScript's fresh flag); a retry must not.
func TestRetriedPublishAfterRatioChange(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		ctx := ctxT(t)
		var users []string
		for i := range 40 {
			users = append(users, fmt.Sprintf("r%d", i))
			follow(t, v.c, users[i], "a")
		}
		// The first attempt: the post record, and p1 in the first 10 inboxes.
		if err := rdb.HSet(ctx, "willow:tl:p:a p1", "t", time.Now().UnixMilli(), "m", "[]", "k", "[]").Err(); err != nil {
			t.Fatal(err)
		}
		for _, u := range users[:10] {
			if err := rdb.ZAdd(ctx, "willow:tl:in:{"+u+"}", redis.Z{Score: 1, Member: "a p1"}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		v.knobs(1, 0)
		r := publish(t, v.c, "a", "p1")
		if r.GetHeld() != 30 || r.GetDelivered() != 11 {
			t.Fatalf("retried publish: %v, want 30 held, 11 delivered (10 before, the author)", r)
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		for _, u := range users {
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != "[a/p1]" {
				t.Errorf("%s sees %s", u, posts(items))
			}
		}
	})
}
