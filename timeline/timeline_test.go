package timeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/timeline"
)

// svc is one timeline service under test: node, server, client.
type svc struct {
	n      *node.Node
	s      *timeline.Server
	c      willowv1.TimelineClient
	ver    atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

var nodeSeq atomic.Int64

func start(t *testing.T, rdb redis.UniversalClient, cfg timeline.Config) *svc {
	t.Helper()
	return startNow(t, rdb, cfg, nil)
}

// startNow starts a service whose clock is now (nil: time.Now).
func startNow(t *testing.T, rdb redis.UniversalClient, cfg timeline.Config, now func() time.Time) *svc {
	t.Helper()
	n, err := node.New(node.Config{ID: fmt.Sprintf("tl-%d", nodeSeq.Add(1)), Role: "timeline", Region: "a",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := timeline.New(cfg, timeline.Deps{Node: n, Redis: rdb, Now: now, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	v := &svc{n: n, s: s, c: willowv1.NewTimelineClient(conn), cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = n.Run(ctx) }()
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	go func() { wg.Wait(); close(v.done) }()
	t.Cleanup(v.stop)
	return v
}

// stop stops the service and waits for it.
func (v *svc) stop() {
	v.cancel()
	<-v.done
}

// knobs pushes timeline knobs to the service's node.
func (v *svc) knobs(ratio, rate float64) {
	v.n.ApplyFlex(&willowv1.FlexState{Version: v.ver.Add(1), Knobs: map[string]string{
		"timeline_delay_ratio":   strconv.FormatFloat(ratio, 'g', -1, 64),
		"timeline_release_per_s": strconv.FormatFloat(rate, 'g', -1, 64),
	}})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func follow(t *testing.T, c willowv1.TimelineClient, follower, author string) {
	t.Helper()
	if _, err := c.Follow(ctxT(t), &willowv1.FollowRequest{Follower: follower, Author: author}); err != nil {
		t.Fatalf("follow %s %s: %v", follower, author, err)
	}
}

func publish(t testing.TB, c willowv1.TimelineClient, author, post string) *willowv1.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &willowv1.PublishRequest{Author: author, PostId: post, MediaIds: []string{"s.a.n1." + post}})
	if err != nil {
		t.Errorf("publish %s %s: %v", author, post, err)
		return &willowv1.PublishResponse{}
	}
	return r
}

// pollAll reads user's inbox from cursor to the end, limit items a page.
func pollAll(t testing.TB, c willowv1.TimelineClient, user, cursor string, limit int32) ([]*willowv1.TimelineItem, string) {
	t.Helper()
	var all []*willowv1.TimelineItem
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := c.Poll(ctx, &willowv1.PollRequest{User: user, Cursor: cursor, Limit: limit})
		cancel()
		if err != nil {
			t.Fatalf("poll %s: %v", user, err)
		}
		all = append(all, r.GetItems()...)
		cursor = r.GetCursor()
		if len(r.GetItems()) < int(limit) {
			return all, cursor
		}
	}
}

func posts(items []*willowv1.TimelineItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.GetAuthor() + "/" + it.GetPostId()
	}
	return out
}

func stats(t testing.TB, c willowv1.TimelineClient) *willowv1.TimelineStatsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Stats(ctx, &willowv1.TimelineStatsRequest{})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

// waitDrained waits until no item is held and returns when that happened.
func waitDrained(t *testing.T, c willowv1.TimelineClient, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := stats(t, c)
		if st.GetHeldItems() == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d items held after %v", st.GetHeldItems(), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// users returns a user ID delayed at ratio r, and one that is not.
func users(r float64) (held, free string) { return usersAt(r, time.Now()) }

// usersAt is users for a service whose clock reads now.
func usersAt(r float64, now time.Time) (held, free string) {
	for i := 0; held == "" || free == ""; i++ {
		u := fmt.Sprintf("u%d", i)
		if shedding.NewUserHash(nil).InRatio(u, now, r) {
			if held == "" {
				held = u
			}
		} else if free == "" {
			free = u
		}
	}
	return held, free
}

func TestDelayedRatio(t *testing.T) {
	for _, r := range []float64{0, 0.1, 0.3, 0.5, 0.7, 1} {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			held := 0
			for i := range 10000 {
				if delayed(fmt.Sprintf("user-%d", i), r) {
					held++
				}
			}
			if got := float64(held) / 10000; got < r-0.02 || got > r+0.02 {
				t.Errorf("ratio %v: %v of 10k users delayed", r, got)
			}
		})
	}
}

// delayed reports whether the service holds user's items at ratio r now:
// the cluster's user hash with the default key (the test nodes').
func delayed(user string, r float64) bool {
	return shedding.NewUserHash(nil).InRatio(user, time.Now(), r)
}

func TestRatioAccuracyPublish(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		ctx := ctxT(t)
		const n = 10000
		want := 0
		members := make([]any, n)
		for i := range n {
			u := fmt.Sprintf("user-%d", i)
			members[i] = u
			if delayed(u, 0.3) {
				want++
			}
		}
		if err := rdb.SAdd(ctx, "willow:tl:f:star", members...).Err(); err != nil {
			t.Fatal(err)
		}
		v.knobs(0.3, 0) // rate 0: nothing is released during the test
		r := publish(t, v.c, "star", "p1")
		if int(r.GetHeld()) != want || int(r.GetDelivered()) != n-want+1 {
			t.Errorf("publish: delivered %d held %d, want %d and %d", r.GetDelivered(), r.GetHeld(), n-want+1, want)
		}
		if got := float64(r.GetHeld()) / n; got < 0.28 || got > 0.32 {
			t.Errorf("held ratio %v, want 0.3 ± 0.02", got)
		}
		t.Logf("ratio 0.3: %d of %d followers held (%.4f)", r.GetHeld(), n, float64(r.GetHeld())/n)
		// Idempotent: the same post again changes nothing.
		if r2 := publish(t, v.c, "star", "p1"); r2.GetHeld() != r.GetHeld() || r2.GetDelivered() != r.GetDelivered() {
			t.Errorf("second publish: %v, first %v", r2, r)
		}
		if st := stats(t, v.c); st.GetHeldItems() != int64(want) || st.GetHeldUsers() != int64(want) {
			t.Errorf("stats %v, want %d held items and users", st, want)
		}
		// Heartbeat gauges and Prometheus metrics follow within a refresh.
		deadline := time.Now().Add(5 * time.Second)
		for v.s.Gauges()["held_items"] != float64(want) || v.s.Gauges()["held_users"] != float64(want) {
			if time.Now().After(deadline) {
				t.Fatalf("gauges %v, want %d held items and users", v.s.Gauges(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		mfs, err := v.n.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		for name, val := range map[string]float64{
			"willow_timeline_held_items": float64(want), "willow_timeline_held_users": float64(want),
			"willow_timeline_published_total": 1, "willow_timeline_held_total": float64(want),
			"willow_timeline_delivered_total": float64(n - want + 1),
		} {
			if got[name] != val {
				t.Errorf("metric %s = %v, want %v", name, got[name], val)
			}
		}
		for _, name := range []string{"willow_timeline_oldest_held_age_seconds", "willow_timeline_release_per_second", "willow_timeline_released_total"} {
			if _, ok := got[name]; !ok {
				t.Errorf("metric %s missing", name)
			}
		}
	})
}

func TestBadInput(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		ctx := ctxT(t)
		tests := []struct {
			name   string
			call   func() error
			reason string
		}{
			{"follow empty follower", func() error {
				_, err := v.c.Follow(ctx, &willowv1.FollowRequest{Author: "a"})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"follow self", func() error {
				_, err := v.c.Follow(ctx, &willowv1.FollowRequest{Follower: "a", Author: "a"})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"unfollow empty author", func() error {
				_, err := v.c.Unfollow(ctx, &willowv1.FollowRequest{Follower: "a"})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"publish empty post", func() error {
				_, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a"})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"publish space in author", func() error {
				_, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a b", PostId: "p"})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"publish empty media id", func() error {
				_, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a", PostId: "p", MediaIds: []string{""}})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"poll empty user", func() error {
				_, err := v.c.Poll(ctx, &willowv1.PollRequest{})
				return err
			}, rpcstatus.ReasonBadRequest},
			{"poll bad cursor", func() error {
				_, err := v.c.Poll(ctx, &willowv1.PollRequest{User: "a", Cursor: "x"})
				return err
			}, timeline.ReasonBadCursor},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if status.Code(err) != codes.InvalidArgument || rpcstatus.Reason(err) != tt.reason {
					t.Errorf("got %v (reason %q), want INVALID_ARGUMENT %s", err, rpcstatus.Reason(err), tt.reason)
				}
			})
		}
	})
}

func TestHeldInvisibleThenReleased(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		held, free := users(0.5)
		follow(t, v.c, held, "author")
		follow(t, v.c, free, "author")
		v.knobs(0.5, 1000)

		_, heldCur := pollAll(t, v.c, held, "", 10)
		for i := 1; i <= 3; i++ {
			r := publish(t, v.c, "author", fmt.Sprintf("p%d", i))
			if r.GetDelivered() != 2 || r.GetHeld() != 1 {
				t.Fatalf("publish p%d: %v, want delivered 2 (author, %s) held 1 (%s)", i, r, free, held)
			}
		}
		want := []string{"author/p1", "author/p2", "author/p3"}
		for _, u := range []string{free, "author"} {
			items, _ := pollAll(t, v.c, u, "", 10)
			if fmt.Sprint(posts(items)) != fmt.Sprint(want) {
				t.Errorf("%s sees %v, want %v", u, posts(items), want)
			}
			if len(items) > 0 && (len(items[0].GetMediaIds()) != 1 || items[0].GetPostedAtUnixMs() == 0) {
				t.Errorf("item %v lacks media or time", items[0])
			}
		}
		items, cur := pollAll(t, v.c, held, heldCur, 10)
		if len(items) != 0 {
			t.Fatalf("delayed user %s sees %v while held", held, posts(items))
		}
		st := stats(t, v.c)
		if st.GetHeldItems() != 3 || st.GetHeldUsers() != 1 {
			t.Errorf("stats while held: %v", st)
		}

		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		// Released items appear after the cursor taken while they were held.
		items, _ = pollAll(t, v.c, held, cur, 2)
		if fmt.Sprint(posts(items)) != fmt.Sprint(want) {
			t.Errorf("after release %s sees %v, want %v", held, posts(items), want)
		}
		if st := stats(t, v.c); st.GetHeldUsers() != 0 || st.GetReleasedTotal() != 3 || st.GetOldestHeldAgeMs() != 0 {
			t.Errorf("stats after release: %v", st)
		}
		// Republishing a released post does not deliver it again.
		publish(t, v.c, "author", "p2")
		if items, _ := pollAll(t, v.c, held, "", 10); len(items) != 3 {
			t.Errorf("after republish %s sees %v", held, posts(items))
		}
	})
}

func TestBacklogKeepsOrder(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		// A user who left the delayed set but still has held items gets new
		// items behind the backlog, so they appear in publish order.
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		held, _ := users(0.5)
		follow(t, v.c, held, "a")
		v.knobs(0.5, 0)
		publish(t, v.c, "a", "p1")
		v.knobs(0, 0) // not delayed any more, release paused
		if r := publish(t, v.c, "a", "p2"); r.GetHeld() != 1 {
			t.Errorf("p2 behind the backlog: %v, want held 1", r)
		}
		v.knobs(0, 1000)
		waitDrained(t, v.c, 10*time.Second)
		items, _ := pollAll(t, v.c, held, "", 10)
		if got := fmt.Sprint(posts(items)); got != "[a/p1 a/p2]" {
			t.Errorf("got %s", got)
		}
	})
}

// holdAll publishes posts×authors items to followers, all held (ratio 1).
func holdAll(t *testing.T, v *svc, followers, posts int) int {
	t.Helper()
	v.knobs(1, 0)
	for f := range followers {
		follow(t, v.c, fmt.Sprintf("f%d", f), "star")
	}
	for p := range posts {
		publish(t, v.c, "star", fmt.Sprintf("p%d", p))
	}
	total := followers * posts
	if st := stats(t, v.c); st.GetHeldItems() != int64(total) {
		t.Fatalf("held %d, want %d", st.GetHeldItems(), total)
	}
	return total
}

// checkAll polls every follower and checks each sees every post once, in
// order.
func checkAll(t *testing.T, c willowv1.TimelineClient, followers, posts int) {
	t.Helper()
	for f := range followers {
		items, _ := pollAll(t, c, fmt.Sprintf("f%d", f), "", 1000)
		if len(items) != posts {
			t.Errorf("f%d sees %d items, want %d", f, len(items), posts)
			continue
		}
		for i, it := range items {
			if it.GetPostId() != fmt.Sprintf("p%d", i) {
				t.Errorf("f%d item %d is %s", f, i, it.GetPostId())
				break
			}
		}
	}
}

func TestReleaseRateCap(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		v := start(t, rdb, timeline.Config{})
		total := holdAll(t, v, 40, 10)
		const rate = 200.0
		begin := time.Now()
		v.knobs(0, rate)
		end := waitDrained(t, v.c, 20*time.Second)
		got := float64(total) / end.Sub(begin).Seconds()
		t.Logf("released %d items in %v: %.1f items/s (cap %v)", total, end.Sub(begin), got, rate)
		if got > rate*1.1 {
			t.Errorf("release rate %.1f/s exceeds cap %v by more than 10%%", got, rate)
		}
		if got < rate*0.5 {
			t.Errorf("release rate %.1f/s is far below cap %v", got, rate)
		}
		checkAll(t, v.c, 40, 10)
	})
}

func TestTwoServersShareCap(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		r := rt
		a := start(t, r.Client(t), timeline.Config{})
		b := start(t, r.Client(t), timeline.Config{})
		b.knobs(1, 0)
		total := holdAll(t, a, 40, 10)
		const rate = 200.0
		begin := time.Now()
		a.knobs(0, rate)
		b.knobs(0, rate)
		end := waitDrained(t, a.c, 20*time.Second)
		got := float64(total) / end.Sub(begin).Seconds()
		t.Logf("two servers released %d items in %v: %.1f items/s (cap %v)", total, end.Sub(begin), got, rate)
		if got > rate*1.1 {
			t.Errorf("release rate %.1f/s exceeds cap %v by more than 10%%", got, rate)
		}
		checkAll(t, b.c, 40, 10)
	})
}

func TestRestartResumesRelease(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		r := rt
		v := start(t, r.Client(t), timeline.Config{})
		total := holdAll(t, v, 30, 10)
		v.knobs(0, 100)
		time.Sleep(time.Second)
		v.stop()
		left, err := r.Client(t).Get(context.Background(), "{willow:tl:}hc").Int()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped after 1s at 100/s with %d of %d items still held", left, total)
		if left <= 0 || left >= total {
			t.Fatalf("held %d of %d after stopping mid-release", left, total)
		}
		w := start(t, r.Client(t), timeline.Config{})
		w.knobs(0, 1000)
		waitDrained(t, w.c, 20*time.Second)
		checkAll(t, w.c, 30, 10)
		if st := stats(t, w.c); st.GetReleasedTotal() != int64(total) {
			t.Errorf("released total %d, want %d", st.GetReleasedTotal(), total)
		}
	})
}

func TestConcurrentPublishAndRelease(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		// Authors publish in parallel while the ratio flips and the release
		// runs; pollers follow some inboxes by cursor meanwhile. In the end
		// every follower has every post exactly once, each author's posts in
		// publish order, and the pollers saw exactly that too.
		r := rt
		a := start(t, r.Client(t), timeline.Config{ReleaseBatch: 20})
		b := start(t, r.Client(t), timeline.Config{ReleaseBatch: 20})
		const authors, postsEach, followers = 4, 40, 30
		for f := range followers {
			for au := range authors {
				follow(t, a.c, fmt.Sprintf("f%d", f), fmt.Sprintf("a%d", au))
			}
		}
		a.knobs(0.5, 3000)
		b.knobs(0.5, 3000)

		stop := make(chan struct{})
		var bg sync.WaitGroup
		// Flip the ratio on both services while publishing.
		bg.Add(1)
		go func() {
			defer bg.Done()
			ratios := []float64{0, 0.8, 0.3, 0, 0.6}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
				}
				a.knobs(ratios[i%len(ratios)], 3000)
				b.knobs(ratios[(i+1)%len(ratios)], 3000)
			}
		}()
		// Pollers follow three inboxes by cursor while all this happens.
		seen := make([][]string, 3)
		for p := range seen {
			bg.Add(1)
			go func() {
				defer bg.Done()
				cur := ""
				for {
					select {
					case <-stop:
						return
					default:
					}
					items, next := pollAll(t, b.c, fmt.Sprintf("f%d", p), cur, 5)
					seen[p] = append(seen[p], posts(items)...)
					cur = next
					time.Sleep(3 * time.Millisecond)
				}
			}()
		}
		var pub sync.WaitGroup
		for au := range authors {
			pub.Add(1)
			go func() {
				defer pub.Done()
				c := a.c
				if au%2 == 1 {
					c = b.c
				}
				for p := range postsEach {
					publish(t, c, fmt.Sprintf("a%d", au), fmt.Sprintf("p%03d", p))
				}
			}()
		}
		pub.Wait()
		close(stop)
		bg.Wait()
		a.knobs(0, 3000)
		b.knobs(0, 3000)
		waitDrained(t, a.c, 20*time.Second)

		check := func(who string, got []string) {
			t.Helper()
			if len(got) != authors*postsEach {
				t.Errorf("%s: %d items, want %d", who, len(got), authors*postsEach)
			}
			dup := map[string]bool{}
			last := map[string]string{}
			for _, p := range got {
				if dup[p] {
					t.Errorf("%s: %s twice", who, p)
				}
				dup[p] = true
				au, post, _ := strings.Cut(p, "/")
				if post <= last[au] {
					t.Errorf("%s: %s after %s/%s", who, p, au, last[au])
				}
				last[au] = post
			}
		}
		for f := range followers {
			items, _ := pollAll(t, a.c, fmt.Sprintf("f%d", f), "", 37)
			check(fmt.Sprintf("f%d", f), posts(items))
		}
		// The pollers read on from where they stopped.
		for p := range seen {
			items, _ := pollAll(t, a.c, fmt.Sprintf("f%d", p), "", 1000)
			all := posts(items)
			if len(seen[p]) > len(all) || fmt.Sprint(seen[p]) != fmt.Sprint(all[:len(seen[p])]) {
				t.Errorf("poller f%d saw %d items not a prefix of the inbox", p, len(seen[p]))
			}
		}
		st := stats(t, a.c)
		t.Logf("released %d items during concurrent publishing", st.GetReleasedTotal())
		if st.GetHeldUsers() != 0 || st.GetOldestHeldAgeMs() != 0 {
			t.Errorf("stats after drain: %v", st)
		}
	})
}

func TestOldestHeldAge(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		var clock atomic.Int64
		clock.Store(time.Date(2026, 2, 10, 20, 0, 0, 0, time.UTC).UnixMilli())
		now := func() time.Time { return time.UnixMilli(clock.Load()) }
		v := startNow(t, rdb, timeline.Config{}, now)
		held, _ := usersAt(0.5, now())
		follow(t, v.c, held, "a")
		v.knobs(0.5, 0)
		publish(t, v.c, "a", "p1")
		clock.Add(30_000)
		publish(t, v.c, "a", "p2")
		clock.Add(60_000)
		if st := stats(t, v.c); st.GetOldestHeldAgeMs() != 90_000 || st.GetHeldItems() != 2 {
			t.Errorf("stats %v, want oldest held 90000 ms, 2 items", st)
		}
		items, _ := pollAll(t, v.c, "a", "", 10)
		if len(items) != 2 || items[0].GetPostedAtUnixMs() != clock.Load()-90_000 {
			t.Errorf("author's items %v", items)
		}
	})
}

func TestRedisDown(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		r := rt
		v := start(t, r.Client(t), timeline.Config{})
		r.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := v.c.Publish(ctx, &willowv1.PublishRequest{Author: "a", PostId: "p"})
		if status.Code(err) != codes.Unavailable || rpcstatus.Reason(err) != redisconn.ReasonRedis {
			t.Errorf("publish with redis down: %v, want UNAVAILABLE redis", err)
		}
		if g := v.s.Gauges(); len(g) != 2 {
			t.Errorf("gauges %v", g)
		}
	})
}
