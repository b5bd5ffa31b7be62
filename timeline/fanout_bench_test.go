package timeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/timeline"
)

// redisMeter counts Redis round trips (one per command or pipeline sent
// to one server) and the bytes on the wire, both ways.
type redisMeter struct{ trips, bytes atomic.Int64 }

func (m *redisMeter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &meteredConn{Conn: c, n: &m.bytes}, nil
	}
}

func (m *redisMeter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { m.trips.Add(1); return next(ctx, cmd) }
}

func (m *redisMeter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { m.trips.Add(1); return next(ctx, cmds) }
}

type meteredConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// meteredClient returns a client for r whose every server connection is
// metered (on a cluster, each master's client).
func meteredClient(b *testing.B, r testenv.RedisTarget, m *redisMeter) redis.UniversalClient {
	c, err := redisconn.Open(r.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(m) })
	} else {
		c.AddHook(m)
	}
	return c
}

// forEachServer calls fn for the server or, in parallel, every master.
func forEachServer(ctx context.Context, c redis.UniversalClient, fn func(*redis.Client)) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { fn(m); return nil })
		return
	}
	fn(c.(*redis.Client))
}

// usedMemory sums INFO used_memory over the server or every master.
func usedMemory(ctx context.Context, c redis.UniversalClient) int64 {
	read := func(cl *redis.Client) int64 {
		s, _ := cl.Info(ctx, "memory").Result()
		for _, l := range strings.Split(s, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		var sum atomic.Int64
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { sum.Add(read(m)); return nil })
		return sum.Load()
	}
	return read(c.(*redis.Client))
}

// cmdStat is one command's INFO commandstats line: calls and usec.
type cmdStat struct{ calls, usec int64 }

// redisCommands sums INFO commandstats per command over the server or
// every master (INFO itself left out): inner calls of scripts count as
// their command, and EVALSHA's usec holds them.
func redisCommands(ctx context.Context, c redis.UniversalClient) map[string]cmdStat {
	var mu sync.Mutex
	out := map[string]cmdStat{}
	read := func(cl *redis.Client) {
		s, _ := cl.Info(ctx, "commandstats").Result()
		for _, l := range strings.Split(s, "\r\n") {
			name, stats, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
			if !ok || !strings.HasPrefix(l, "cmdstat_") || name == "info" {
				continue
			}
			var st cmdStat
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					st.usec, _ = strconv.ParseInt(v, 10, 64)
				} else if v, ok := strings.CutPrefix(kv, "calls="); ok {
					st.calls, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			mu.Lock()
			o := out[name]
			out[name] = cmdStat{o.calls + st.calls, o.usec + st.usec}
			mu.Unlock()
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { read(m); return nil })
	} else {
		read(c.(*redis.Client))
	}
	return out
}

// redisCPU sums INFO cpu (used_cpu_user + used_cpu_sys: the whole
// redis-server process, commands, scripts, network and event loop) over
// the server or every master, in microseconds.
func redisCPU(ctx context.Context, c redis.UniversalClient) int64 {
	var sum atomic.Int64
	read := func(cl *redis.Client) {
		s, _ := cl.Info(ctx, "cpu").Result()
		for _, l := range strings.Split(s, "\r\n") {
			k, v, _ := strings.Cut(l, ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				sum.Add(int64(f * 1e6))
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { read(m); return nil })
	} else {
		read(c.(*redis.Client))
	}
	return sum.Load()
}

// processCPU is this process's user+system CPU time: the timeline
// service and its gRPC client, both in the benchmark's process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startBenchTimeline runs a timeline service on rdb and returns a client.
func startBenchTimeline(b *testing.B, rdb redis.UniversalClient, ratio, rate float64) (willowv1.TimelineClient, *node.Node) {
	n, err := node.New(node.Config{ID: "tl-bench", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	s, err := timeline.New(timeline.Config{}, timeline.Deps{Node: n, Redis: rdb})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = n.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	b.Cleanup(func() { cancel(); <-done; <-done })
	n.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{
		"timeline_delay_ratio": fmt.Sprint(ratio), "timeline_release_per_s": fmt.Sprint(rate)}})
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return willowv1.NewTimelineClient(conn), n
}

func addFollowers(b *testing.B, rdb redis.UniversalClient, author string, f int) {
	members := make([]any, f)
	for i := range members {
		members[i] = fmt.Sprintf("user-%d", i)
	}
	if err := rdb.SAdd(context.Background(), "willow:tl:f:"+author, members...).Err(); err != nil {
		b.Fatal(err)
	}
}

// fillInboxes gives each of the f followers addFollowers made an inbox of
// n items or a few more, as a long-running feed has (n = MaxInbox: full;
// a delivery trims a list back to MaxInbox when it makes it MaxInbox +
// 32 long, so follower i's inbox gets n + i%32 items, and a run's
// publishes meet their share of trims): items "J user-K pJ" (other
// authors' posts, the size of a real ref) with sequence numbers J =
// 1..n+31, below any a publish hands out. The first n items are built
// in one inbox with RPUSH and copied to the others with DUMP and
// RESTORE, the extra ones pushed, pipelined (1000 keys a pipeline);
// then every inbox's LLEN is checked, so a seed that fell short fails
// the benchmark instead of measuring small inboxes. On an append-only server it then rewrites the AOF and
// waits for the rewrite to end, so the one the seed's volume triggers
// does not run during the measurement.
func fillInboxes(b *testing.B, rdb redis.UniversalClient, f, n int) {
	ctx := context.Background()
	inbox := func(i int) string { return fmt.Sprintf("willow:tl:in:{user-%d}", i) }
	over := min(32, (n+15)/16) // deliverGroup's trim slack at MaxInbox n: min(32, ceil(n/16))
	items := make([]any, n+over-1)
	for j := range items {
		items[j] = fmt.Sprintf("%d user-%d p%d", j+1, 10000+j%500, 1000000+j)
	}
	if err := rdb.RPush(ctx, inbox(0), items[:n]...).Err(); err != nil {
		b.Fatal(err)
	}
	blob, err := rdb.Dump(ctx, inbox(0)).Result()
	if err != nil {
		b.Fatal(err)
	}
	for a := 1; a < f; a += 1000 {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := a; i < min(f, a+1000); i++ {
				p.RestoreReplace(ctx, inbox(i), 0, blob)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	for a := 0; a < f; a += 1000 {
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := a; i < min(f, a+1000); i++ {
				if i%over > 0 {
					p.RPush(ctx, inbox(i), items[n:n+i%over]...)
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	for a := 0; a < f; a += 1000 {
		var lens []*redis.IntCmd
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := a; i < min(f, a+1000); i++ {
				lens = append(lens, p.LLen(ctx, inbox(i)))
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		for k, c := range lens {
			if want := int64(n + (a+k)%over); c.Val() != want {
				b.Fatalf("inbox of user-%d holds %d items after the seed, want %d", a+k, c.Val(), want)
			}
		}
	}
	forEachServer(ctx, rdb, func(cl *redis.Client) {
		if on, _ := cl.ConfigGet(ctx, "appendonly").Result(); on["appendonly"] != "yes" {
			return
		}
		_ = cl.BgRewriteAOF(ctx).Err() // "already in progress" is fine: the wait below covers it
		for t0 := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			s, err := cl.Info(ctx, "persistence").Result()
			if err != nil {
				b.Fatal(err)
			}
			if strings.Contains(s, "aof_rewrite_in_progress:0") && strings.Contains(s, "aof_rewrite_scheduled:0") {
				return
			}
			if time.Since(t0) > 2*time.Minute {
				b.Fatal("AOF rewrite after the seed still running after 2 minutes")
			}
		}
	})
}

// BenchmarkTimelineFanout publishes for an author with F followers at
// delay ratio 0 and 0.5 (release paused), on one redis-server and on a
// real 3-master Redis Cluster, over gRPC, to followers whose inboxes are
// empty before the run (inbox=small: they hold at most the run's ~21
// items, one listpack) or full (inbox=full: MaxInbox items each,
// as in a feed that has run a while; fillInboxes). Reported
// per publish: p50/p99 latency, Redis round trips and bytes, items held,
// Redis memory growth, and CPU: the redis-server processes' (INFO cpu)
// and this process's (the service and its client), which a loaded
// machine inflates less than latency. make bench-timeline runs it.
func BenchmarkTimelineFanout(b *testing.B) {
	for _, kind := range testenv.RedisKinds {
		for _, f := range []int{10, 100, 1000, 2000, 5000} {
			for _, ratio := range []float64{0, 0.5} {
				for _, full := range []bool{false, true} {
					inbox := "small"
					if full {
						inbox = "full"
					}
					b.Run(fmt.Sprintf("%s/F=%d/ratio=%v/inbox=%s", kind, f, ratio, inbox), func(b *testing.B) {
						benchFanout(b, kind, f, ratio, full)
					})
				}
			}
		}
	}
}

// benchFanout is one BenchmarkTimelineFanout case.
func benchFanout(b *testing.B, kind string, f int, ratio float64, full bool) {
	r := testenv.StartRedisKind(b, kind)
	var m redisMeter
	rdb := meteredClient(b, r, &m)
	c, _ := startBenchTimeline(b, rdb, ratio, 0)
	addFollowers(b, rdb, "star", f)
	if full {
		fillInboxes(b, rdb, f, timeline.DefaultMaxInbox)
	}
	ctx := context.Background()
	// Warm up: scripts loaded, connections dialed.
	if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: "warm"}); err != nil {
		b.Fatal(err)
	}
	diag := os.Getenv("WILLOW_TL_COMMANDSTATS") != ""
	if diag {
		forEachServer(ctx, rdb, func(cl *redis.Client) {
			cl.ConfigSet(ctx, "slowlog-log-slower-than", "500")
			cl.ConfigSet(ctx, "slowlog-max-len", "4096")
			cl.SlowLogReset(ctx)
		})
	}
	mem0 := usedMemory(ctx, rdb)
	trips0, bytes0 := m.trips.Load(), m.bytes.Load()
	cmds0 := redisCommands(ctx, rdb)
	rcpu0, gcpu0 := redisCPU(ctx, rdb), processCPU()
	lat := make([]time.Duration, 0, b.N)
	held := 0
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		resp, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: fmt.Sprint("p", i), MediaIds: []string{"s.a.n1.k"}})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		held += int(resp.GetHeld())
	}
	b.StopTimer()
	rcpu, gcpu := redisCPU(ctx, rdb)-rcpu0, processCPU()-gcpu0
	var calls int64
	var per []string
	for name, st := range redisCommands(ctx, rdb) {
		st.calls -= cmds0[name].calls
		st.usec -= cmds0[name].usec
		calls += st.calls
		if st.calls > 0 {
			per = append(per, fmt.Sprintf("%s %.0f calls %.2f ms", name, float64(st.calls)/float64(b.N), float64(st.usec)/float64(b.N)/1000))
		}
	}
	if diag {
		slices.Sort(per)
		b.Logf("per publish (INFO commandstats; a script's usec includes its inner calls'): %s", strings.Join(per, "; "))
		var mu sync.Mutex
		var slow []time.Duration
		forEachServer(ctx, rdb, func(cl *redis.Client) {
			logs, _ := cl.SlowLogGet(ctx, 4096).Result()
			mu.Lock()
			for _, l := range logs {
				slow = append(slow, l.Duration)
			}
			mu.Unlock()
		})
		slices.Sort(slow)
		if len(slow) > 0 {
			b.Logf("SLOWLOG, commands over 0.5 ms: %d (%.1f a publish), median %v, max %v",
				len(slow), float64(len(slow))/float64(b.N), slow[len(slow)/2], slow[len(slow)-1])
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	n := float64(b.N)
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(m.trips.Load()-trips0)/n, "trips/op")
	b.ReportMetric(float64(m.bytes.Load()-bytes0)/n/1024, "KB/op")
	b.ReportMetric(float64(held)/n, "held/op")
	b.ReportMetric(float64(usedMemory(ctx, rdb)-mem0)/n/1024, "memKB/op")
	b.ReportMetric(float64(rcpu)/n/1000, "redis-cpu-ms/op")
	b.ReportMetric(float64(calls)/n, "redis-cmds/op")
	b.ReportMetric(float64(gcpu.Microseconds())/n/1000, "go-cpu-ms/op")
}

// BenchmarkTimelineRelease holds one post for half of 5000 followers
// whose inboxes are full (fillInboxes), then releases the backlog at
// timeline_release_per_s = 2000 and reports the time it took and the
// measured rate against the cap.
func BenchmarkTimelineRelease(b *testing.B) {
	const f, rate = 5000, 2000.0
	for _, kind := range testenv.RedisKinds {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				r := testenv.StartRedisKind(b, kind)
				rdb := r.Client(b)
				c, n := startBenchTimeline(b, rdb, 0.5, 0)
				addFollowers(b, rdb, "star", f)
				fillInboxes(b, rdb, f, timeline.DefaultMaxInbox)
				ctx := context.Background()
				resp, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: "p"})
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				n.ApplyFlex(&willowv1.FlexState{Version: 2, Knobs: map[string]string{
					"timeline_delay_ratio": "0", "timeline_release_per_s": fmt.Sprint(rate)}})
				for {
					st, err := c.Stats(ctx, &willowv1.TimelineStatsRequest{})
					if err != nil {
						b.Fatal(err)
					}
					if st.GetHeldItems() == 0 {
						break
					}
					if time.Since(t0) > time.Minute {
						b.Fatalf("still %d held after a minute", st.GetHeldItems())
					}
					time.Sleep(5 * time.Millisecond)
				}
				took := time.Since(t0)
				got := float64(resp.GetHeld()) / took.Seconds()
				b.ReportMetric(float64(resp.GetHeld()), "held")
				b.ReportMetric(took.Seconds(), "release-s")
				b.ReportMetric(got, "items/s")
				b.ReportMetric(got/rate, "of-cap")
				if got > rate*1.1 {
					b.Errorf("released %.0f items/s, cap %v", got, rate)
				}
			}
		})
	}
}

// BenchmarkTimelineRetry publishes again, for an author with 5000
// followers whose inboxes are full, a post whose first attempt left its
// record without an outcome, at delay ratio 0: a publish that is not the
// first, so it looks through every follower's inbox before adding
// (deliverGroup). first=reached: the first attempt delivered to every
// follower (the retry finds each item among the newest); first=none: it
// made only the post record (the retry looks through each inbox down to
// the items older than the post, here the seeded ones, and delivers).
// Reported as BenchmarkTimelineFanout's, per retry.
func BenchmarkTimelineRetry(b *testing.B) {
	for _, kind := range testenv.RedisKinds {
		for _, reached := range []bool{true, false} {
			first := "none"
			if reached {
				first = "reached"
			}
			b.Run(fmt.Sprintf("%s/F=5000/first=%s", kind, first), func(b *testing.B) {
				const f = 5000
				r := testenv.StartRedisKind(b, kind)
				var m redisMeter
				rdb := meteredClient(b, r, &m)
				c, _ := startBenchTimeline(b, rdb, 0, 0)
				addFollowers(b, rdb, "star", f)
				fillInboxes(b, rdb, f, timeline.DefaultMaxInbox)
				ctx := context.Background()
				if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: "warm"}); err != nil {
					b.Fatal(err)
				}
				lat := make([]time.Duration, 0, b.N)
				var rcpu int64
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					post := fmt.Sprint("r", i)
					pk := "willow:tl:p:star " + post
					if reached {
						if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: post}); err != nil {
							b.Fatal(err)
						}
						if err := rdb.HDel(ctx, pk, "done").Err(); err != nil {
							b.Fatal(err)
						}
					} else if err := rdb.HSet(ctx, pk, "t", time.Now().UnixMilli(), "m", "[]", "k", "[]").Err(); err != nil {
						b.Fatal(err)
					}
					rcpu0 := redisCPU(ctx, rdb)
					b.StartTimer()
					t0 := time.Now()
					resp, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: post})
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					b.StopTimer()
					rcpu += redisCPU(ctx, rdb) - rcpu0
					if resp.GetDelivered() != f+1 {
						b.Fatalf("retry: %v, want %d delivered", resp, f+1)
					}
					b.StartTimer()
				}
				b.StopTimer()
				slices.Sort(lat)
				q := func(p float64) float64 {
					return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
				}
				b.ReportMetric(q(0.5), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(float64(rcpu)/float64(b.N)/1000, "redis-cpu-ms/op")
			})
		}
	}
}
