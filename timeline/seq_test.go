package timeline_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/timeline"
)

// TestInboxSequenceAndTrim: an inbox written before the slot's sequence
// counter existed and before inboxes were lists (a sorted set with small
// scores, a cursor handed out on them) gets new items after that cursor,
// whether a poll turned it into a list first ("polled") or publishes
// find the sorted set and add to it ("unpolled", turned by the poll at
// the end); a follower receiving three times MaxInbox posts keeps the
// newest, in order, trimmed back to MaxInbox when a delivery makes the
// list MaxInbox + min(32, ceil(MaxInbox/16)) long (here 22: at most 21
// between deliveries; a sorted set at least once every 16 deliveries),
// and a poll shows exactly the newest MaxInbox.
func TestInboxSequenceAndTrim(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		const max = 20
		v := start(t, rdb, timeline.Config{MaxInbox: max})
		fans := []string{"polled", "unpolled"}
		for _, fan := range fans {
			follow(t, v.c, fan, "star")
			if err := rdb.ZAdd(ctxT(t), "willow:tl:in:{"+fan+"}", redis.Z{Score: 5, Member: "old p0"}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, cur := pollAll(t, v.c, "polled", "", 10); cur != "5" {
			t.Fatalf("cursor on the old item %q, want 5", cur)
		}
		if kind := rdb.Type(ctxT(t), "willow:tl:in:{polled}").Val(); kind != "list" {
			t.Fatalf("a polled inbox is a %s, want a list", kind)
		}
		size := func(fan string) int64 {
			k := "willow:tl:in:{" + fan + "}"
			if fan == "polled" {
				return rdb.LLen(ctxT(t), k).Val()
			}
			return rdb.ZCard(ctxT(t), k).Val()
		}
		for p := 1; p <= 3*max; p++ {
			publish(t, v.c, "star", fmt.Sprintf("p%d", p))
			for _, fan := range fans {
				limit := int64(max + 15)
				if fan == "polled" {
					limit = max + 1
				}
				if n := size(fan); n > limit || n < 1 {
					t.Fatalf("after p%d the inbox of %s holds %d items, MaxInbox %d", p, fan, n, max)
				}
			}
		}
		// A poll shows the newest MaxInbox, whatever the trim left.
		for _, fan := range fans {
			items, _ := pollAll(t, v.c, fan, "5", 7)
			if len(items) != max {
				t.Fatalf("%s: %d items after the old cursor, want %d", fan, len(items), max)
			}
			for i, it := range items {
				if want := fmt.Sprintf("p%d", 3*max-len(items)+1+i); it.GetPostId() != want {
					t.Fatalf("%s: item %d is %s, want %s (the newest, in order)", fan, i, it.GetPostId(), want)
				}
			}
			if n := rdb.LLen(ctxT(t), "willow:tl:in:{"+fan+"}").Val(); fan == "unpolled" && n != max {
				t.Errorf("%s: turned into a list of %d, want %d (trimmed)", fan, n, max)
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
	forEachLayout(t, func(t *testing.T, layout string, rt testenv.RedisTarget, rdb redis.UniversalClient, v *svc, ctx context.Context) {
		var users []string
		for i := range 40 {
			users = append(users, fmt.Sprintf("r%d", i))
			follow(t, v.c, users[i], "a")
		}
		// The first attempt: the post record, and p1 in the first 10
		// inboxes, numbered as a publish numbers them (no lower than
		// its clock less a second); p0 is older than the post.
		created := time.Now()
		if err := rdb.HSet(ctx, "willow:tl:p:a p1", "t", created.UnixMilli(), "m", "[]", "k", "[]").Err(); err != nil {
			t.Fatal(err)
		}
		at := created.UnixMicro() - 500_000
		for _, u := range users[:10] {
			k := "willow:tl:in:{" + u + "}"
			var err error
			if layout == "list" {
				err = rdb.RPush(ctx, k, "1 a p0", fmt.Sprint(at, " a p1"), fmt.Sprint(at+1, " b p1"), fmt.Sprint(at+2, " a p10")).Err()
			} else {
				err = rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "a p1"}).Err()
			}
			if err != nil {
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
		for i, u := range users {
			want := "[a/p1]"
			if i < 10 && layout == "list" {
				want = "[a/p0 a/p1 b/p1 a/p10]"
			}
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != want {
				t.Errorf("%s sees %s, want %s", u, posts(items), want)
			}
		}
	})
}

// TestCounterFollowsClock: a slot's counter far behind the clock (here
// set back by hand) is lifted to it by the next publish and the next
// release, so every item's number is at least its service's clock less
// a second: what lets a retried publish look through only the items
// newer than its post (TestRetriedPublishAfterRatioChange finds them).
func TestCounterFollowsClock(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	v := start(t, rdb, timeline.Config{})
	ctx := ctxT(t)
	held, free := usersAt(0.5, time.Now())
	follow(t, v.c, held, "a")
	follow(t, v.c, free, "a")
	publish(t, v.c, "a", "p0")
	seqOf := func(u, post string) int64 {
		t.Helper()
		items, err := rdb.LRange(ctx, "willow:tl:in:{"+u+"}", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if f := strings.Fields(it); len(f) == 3 && f[2] == post {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
		t.Fatalf("%s has no %s: %q", u, post, items)
		return 0
	}
	for i, post := range []string{"p1", "p2"} {
		if err := rdb.Set(ctx, "{willow:tl:}sq", 5, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			v.knobs(0.5, 0)
		}
		before := time.Now().UnixMicro() - 1_000_000
		publish(t, v.c, "a", post)
		if n := seqOf(free, post); n < before {
			t.Errorf("%s's %s numbered %d, below the clock less a second (%d)", free, post, n, before)
		}
	}
	if err := rdb.Set(ctx, "{willow:tl:}sq", 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMicro() - 1_000_000
	v.knobs(0, 1000)
	waitDrained(t, v.c, 10*time.Second)
	if n := seqOf(held, "p2"); n < before {
		t.Errorf("released %s numbered %d, below the clock less a second (%d)", "p2", n, before)
	}
}

// TestDuplicatePublishMarks: a publish that is not the first of its post
// marks it, and a first publish reaching a user after it (its post
// record was new, so it would not ask the inboxes) finds the mark and
// asks: each follower sees the post once. Here the duplicate runs
// first, with a post record made by hand (an attempt that has not
// finished), and the first publish's record is then made by the next
// Publish (the hand-made one deleted). Then publishes of one post race
// from several goroutines.
func TestDuplicatePublishMarks(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		ctx := ctxT(t)
		var users []string
		for i := range 60 {
			users = append(users, fmt.Sprintf("d%d", i))
			follow(t, v.c, users[i], "a")
		}
		if err := rdb.HSet(ctx, "willow:tl:p:a p1", "t", time.Now().UnixMilli(), "m", "[]", "k", "[]").Err(); err != nil {
			t.Fatal(err)
		}
		if r := publish(t, v.c, "a", "p1"); r.GetDelivered() != 61 {
			t.Fatalf("duplicate: %v, want 61 delivered", r)
		}
		if err := rdb.Del(ctx, "willow:tl:p:a p1").Err(); err != nil {
			t.Fatal(err)
		}
		if r := publish(t, v.c, "a", "p1"); r.GetDelivered() != 61 {
			t.Fatalf("first publish after the duplicate: %v, want 61 delivered", r)
		}
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a", PostId: "p2"}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, u := range append(users, "a") {
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != "[a/p1 a/p2]" {
				t.Errorf("%s sees %s", u, posts(items))
			}
		}
	})
}

// heldKey is user's held key under the default key prefix.
func heldKey(user string) string {
	return "willow:tl:h:{" + timeline.UserTag(user) + "}"
}

// heldLen is the number of items user's held list (or sorted set, from
// before lists) holds.
func heldLen(t *testing.T, rdb redis.UniversalClient, user string) int64 {
	t.Helper()
	ctx, k := ctxT(t), heldKey(user)
	if rdb.Type(ctx, k).Val() == "zset" {
		return rdb.ZCard(ctx, k).Val()
	}
	return rdb.LLen(ctx, k).Val()
}

// heldCounts returns the sum of the held counts of users' slots (each
// slot once; -1 when one is missing) and the items their held sets hold.
func heldCounts(t *testing.T, rdb redis.UniversalClient, s *timeline.Server, users []string) (counts, items int64) {
	t.Helper()
	ctx := ctxT(t)
	seen := map[string]bool{}
	for _, u := range users {
		items += heldLen(t, rdb, u)
		k := timeline.SlotHeldKey(s, u)
		if seen[k] {
			continue
		}
		seen[k] = true
		n, err := rdb.Get(ctx, k).Int64()
		if err == redis.Nil {
			return -1, items
		}
		if err != nil {
			t.Fatal(err)
		}
		counts += n
	}
	return counts, items
}

// TestSlotHeldCount (one server: a cluster keeps no held count): the
// held count is the items held, after publishes that hold some, all, or
// (repeated) none of a post in several scripts, and comes back to 0 when
// the release has moved everything; a publish then delivers to everyone.
func TestSlotHeldCount(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		var rdb redis.UniversalClient = testenv.StartRedis(t).Client(t)
		v := start(t, rdb, timeline.Config{FanoutBatch: 16, ReleaseBatch: 16})
		var fans []string
		for i := range 60 {
			fans = append(fans, fmt.Sprintf("c%d", i))
			follow(t, v.c, fans[i], "a")
		}
		all := append([]string{"a"}, fans...)
		v.knobs(0.5, 0)
		publish(t, v.c, "a", "p1")
		publish(t, v.c, "a", "p2")
		publish(t, v.c, "a", "p1") // a repeat holds nothing new
		v.knobs(1, 0)
		publish(t, v.c, "a", "p3")
		counts, items := heldCounts(t, rdb, v.s, all)
		if items == 0 || counts != items {
			t.Fatalf("held counts sum to %d, held sets hold %d", counts, items)
		}
		if st := stats(t, v.c); st.GetHeldItems() != items {
			t.Fatalf("stats say %d held, held sets hold %d", st.GetHeldItems(), items)
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		if counts, items := heldCounts(t, rdb, v.s, all); counts != 0 || items != 0 {
			t.Fatalf("after the release: held counts %d, held items %d", counts, items)
		}
		if r := publish(t, v.c, "a", "p4"); r.GetDelivered() != int32(len(all)) || r.GetHeld() != 0 {
			t.Fatalf("p4: %v, want all %d delivered", r, len(all))
		}
	})
}

// TestMissingHeldCountAsks (one server): a held count that is missing
// (a Redis holding items from before the count existed) is taken as
// some items held: a user with a backlog gets the next post held behind
// it, and neither publish nor release creates a count that would be
// short.
func TestMissingHeldCountAsks(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		rdb, ctx, v, held := heldFollower(t)
		publish(t, v.c, "a", "p1")
		key := timeline.SlotHeldKey(v.s, held)
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		v.knobs(0, 0)
		if r := publish(t, v.c, "a", "p2"); r.GetHeld() != 1 {
			t.Fatalf("p2 with the count missing: %v, want held 1 behind the backlog", r)
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		if items, _ := pollAll(t, v.c, held, "", 10); fmt.Sprint(posts(items)) != "[a/p1 a/p2]" {
			t.Errorf("%s sees %s", held, posts(items))
		}
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("the missing count was created again (%v)", rdb.Get(ctx, key).Val())
		}
	})
}

// heldFollower starts a timeline on its own Redis with one user who
// follows "a" and whose deliveries are held at ratio 0.5.
func heldFollower(t *testing.T) (redis.UniversalClient, context.Context, *svc, string) {
	t.Helper()
	var rdb redis.UniversalClient = testenv.StartRedis(t).Client(t)
	v := start(t, rdb, timeline.Config{})
	held, _ := users(0.5)
	follow(t, v.c, held, "a")
	v.knobs(0.5, 0)
	return rdb, ctxT(t), v, held
}

// TestHeldIndexFails (one server): when the held index's ZADD behind
// the scripts fails, the publish fails (UNAVAILABLE), though the scripts
// held the post; its retry, once the index can be written, indexes the
// user and holds nothing twice.
func TestHeldIndexFails(t *testing.T) {
	rdb, ctx, v, held := heldFollower(t)
	hu := "{willow:tl:}hu"
	if err := rdb.Set(ctx, hu, "not a zset", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a", PostId: "p1", MediaIds: []string{"s.a.n1.p1"}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "held index") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("publish with hu not a zset: %v, want UNAVAILABLE held index: WRONGTYPE", err)
	}
	if n := heldLen(t, rdb, held); n != 1 {
		t.Fatalf("%s holds %d items after the failed publish, want 1", held, n)
	}
	if err := rdb.Del(ctx, hu).Err(); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v.c, "a", "p1"); r.GetHeld() != 1 {
		t.Fatalf("retry: %v, want held 1", r)
	}
	if n := heldLen(t, rdb, held); n != 1 {
		t.Errorf("%s holds %d items after the retry, want 1", held, n)
	}
	if _, err := rdb.ZScore(ctx, hu, held).Result(); err != nil {
		t.Errorf("%s not in the held index after the retry: %v", held, err)
	}
}

// commandCalls is INFO commandstats' calls of cmd on c.
func commandCalls(t *testing.T, c *redis.Client, cmd string) int64 {
	t.Helper()
	s, err := c.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestNoBacklogCheckWhileNothingHeld: while the held count is 0 a
// publish asks no held set (no EXISTS); while some items are held it
// does, and finds the users with a backlog.
func TestNoBacklogCheckWhileNothingHeld(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	v := start(t, rdb, timeline.Config{})
	for i := range 100 {
		follow(t, v.c, fmt.Sprintf("n%d", i), "a")
	}
	e0 := commandCalls(t, rdb, "exists")
	publish(t, v.c, "a", "p1")
	if n := commandCalls(t, rdb, "exists") - e0; n != 0 {
		t.Errorf("nothing held: the publish ran %d EXISTS", n)
	}
	v.knobs(0.5, 0)
	p2 := publish(t, v.c, "a", "p2")
	v.knobs(0, 0)
	e0 = commandCalls(t, rdb, "exists")
	if r := publish(t, v.c, "a", "p3"); r.GetHeld() == 0 || r.GetHeld() != p2.GetHeld() {
		t.Errorf("p3: %v, want the %d users p2 was held for held again, behind their backlog", r, p2.GetHeld())
	}
	if n := commandCalls(t, rdb, "exists") - e0; n == 0 {
		t.Errorf("items held: the publish ran no EXISTS")
	}
}

// TestHeldIndexEscapedUsers: the users a publish holds, with IDs that
// their keys' hash tags escape ('{', '}', '%'), are in the held index
// under their own IDs, scored by their user hash unit and the post's
// time, also when the first publish finds its scripts missing (SCRIPT
// FLUSH: on one server the index goes behind the scripts in their
// pipeline, and again behind the scripts sent again); the held count
// matches, and a release moves every item to the right inbox.
func TestHeldIndexEscapedUsers(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{FanoutBatch: 4})
		ctx := ctxT(t)
		hash, now := shedding.NewUserHash(nil), time.Now()
		var held, free []string
		for i := 0; len(held) < 6 || len(free) < 3; i++ {
			u := []string{"a{b}c", "}{", "%7B", "%257B%", "x%"}[i%5] + strconv.Itoa(i)
			if hash.InRatio(u, now, 0.5) {
				held = append(held, u)
			} else {
				free = append(free, u)
			}
			follow(t, v.c, u, "star")
		}
		v.knobs(0.5, 0)
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
			if err != nil {
				t.Fatal(err)
			}
		} else if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r1 := publish(t, v.c, "star", "p1")
		publish(t, v.c, "star", "p2")
		publish(t, v.c, "star", "p1") // a repeat indexes again, holds nothing new
		if int(r1.GetHeld()) != len(held) {
			t.Fatalf("p1: %v, want %d held", r1, len(held))
		}
		units, err := rdb.ZRangeWithScores(ctx, "{willow:tl:}hu", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		ages, err := rdb.ZRangeWithScores(ctx, "{willow:tl:}ha", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(units) != len(held) || len(ages) != len(held) {
			t.Fatalf("held index: %v / %v, want %v", units, ages, held)
		}
		posted, err := rdb.HGet(ctx, "willow:tl:p:star p1", "t").Float64()
		if err != nil {
			t.Fatal(err)
		}
		for i, z := range units {
			u := z.Member.(string)
			if !slices.Contains(held, u) || z.Score != hash.Unit(u, now) {
				t.Errorf("held index member %q score %v: not a held user or not its unit %v", u, z.Score, hash.Unit(u, now))
			}
			if ages[i].Score != posted {
				t.Errorf("oldest-held index of %v is %v, want p1's time %v", ages[i].Member, ages[i].Score, posted)
			}
		}
		if st := stats(t, v.c); st.GetHeldItems() != int64(2*len(held)) || st.GetHeldUsers() != int64(len(held)) {
			t.Errorf("stats while held: %v, want %d items of %d users", st, 2*len(held), len(held))
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		for _, u := range append(held, free...) {
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != "[star/p1 star/p2]" {
				t.Errorf("%s sees %v", u, posts(items))
			}
		}
		if st := stats(t, v.c); st.GetHeldUsers() != 0 || st.GetHeldItems() != 0 || st.GetReleasedTotal() != int64(2*len(held)) {
			t.Errorf("stats after release: %v", st)
		}
	})
}

// TestHeldLayouts: a user's held items are a list, or a sorted set held
// by a version from before lists: a publish holds behind either (a first
// publish appends without asking, a retry finds the item already held:
// one item, the held count unchanged), and the release moves them in
// hold order, each once.
func TestHeldLayouts(t *testing.T) {
	forEachLayout(t, func(t *testing.T, layout string, rt testenv.RedisTarget, rdb redis.UniversalClient, v *svc, ctx context.Context) {
		fans := []string{"x", "y{1}", "z%"}
		for _, u := range fans {
			follow(t, v.c, u, "a")
		}
		v.knobs(1, 0)
		publish(t, v.c, "a", "p0")
		if layout != "list" {
			for i, u := range fans {
				k := heldKey(u)
				refs, err := rdb.LRange(ctx, k, 0, -1).Result()
				if err != nil || len(refs) != 1 {
					t.Fatalf("held list of %s: %v %v", u, refs, err)
				}
				if err := rdb.Del(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.ZAdd(ctx, k, redis.Z{Score: float64(1 + i), Member: refs[0]}).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r := publish(t, v.c, "a", "p1"); r.GetHeld() != 3 {
			t.Fatalf("p1: %v, want 3 held", r)
		}
		// A retry: the post record without its outcome.
		if err := rdb.HDel(ctx, "willow:tl:p:a p1", "done").Err(); err != nil {
			t.Fatal(err)
		}
		if r := publish(t, v.c, "a", "p1"); r.GetHeld() != 3 || r.GetDelivered() != 1 {
			t.Fatalf("retried p1: %v, want 3 held (already), 1 delivered", r)
		}
		all := append([]string{"a"}, fans...)
		var items int64
		for _, u := range fans {
			items += heldLen(t, rdb, u)
			if kind := rdb.Type(ctx, heldKey(u)).Val(); (kind == "list") != (layout == "list") {
				t.Fatalf("%s's held items are a %s", u, kind)
			}
		}
		if items != 6 {
			t.Fatalf("held sets hold %d items, want 6", items)
		}
		if rt.Kind == "server" {
			if counts, _ := heldCounts(t, rdb, v.s, all); counts != items {
				t.Fatalf("held count %d, held sets hold %d", counts, items)
			}
		}
		if st := stats(t, v.c); st.GetHeldItems() != 6 || st.GetHeldUsers() != 3 {
			t.Fatalf("stats while held: %v", st)
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		for _, u := range fans {
			if items, _ := pollAll(t, v.c, u, "", 10); fmt.Sprint(posts(items)) != "[a/p0 a/p1]" {
				t.Errorf("%s sees %s", u, posts(items))
			}
			if n := heldLen(t, rdb, u); n != 0 {
				t.Errorf("%s still holds %d", u, n)
			}
		}
		if st := stats(t, v.c); st.GetHeldItems() != 0 || st.GetReleasedTotal() != 6 {
			t.Errorf("stats after release: %v", st)
		}
	})
}

// forEachLayout runs f for each layout of a user's held items (a list,
// and a sorted set held by a version from before lists) on each Redis
// target (one server, a Cluster), with a timeline service started on it.
func forEachLayout(t *testing.T, f func(t *testing.T, layout string, rt testenv.RedisTarget, rdb redis.UniversalClient, v *svc, ctx context.Context)) {
	for _, layout := range []string{"list", "zset from before"} {
		t.Run(layout, func(t *testing.T) {
			testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
				rdb := rt.Client(t)
				f(t, layout, rt, rdb, start(t, rdb, timeline.Config{}), ctxT(t))
			})
		})
	}
}
