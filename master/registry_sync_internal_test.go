package master

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// mgetCounter counts the keys the master reads with MGET.
type mgetCounter struct {
	*redis.Client
	keys atomic.Int64
}

func (c *mgetCounter) MGet(ctx context.Context, keys ...string) *redis.SliceCmd {
	c.keys.Add(int64(len(keys)))
	return c.Client.MGet(ctx, keys...)
}

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newSyncMaster(t *testing.T, id string, rdb Redis, clock *testClock) *Server {
	t.Helper()
	n, err := node.New(node.Config{ID: id, Role: "master", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{OncallToken: "t"}, Deps{Node: n, Redis: rdb, Now: clock.now, Prober: &countingProber{probed: map[string]int{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.ctlEnd)
	return s
}

// A registry reload reads only the entries that changed since the last
// one (heartbeats, registrations and health writes of any master); the
// whole registry is read at start, every regFullEvery (which finds
// expired entries and prunes them from the index and the change log),
// and when Redis lost the change sequence.
func TestRegistryReloadIncremental(t *testing.T) {
	ctx := context.Background()
	raw := testenv.StartRedis(t).Client(t)
	rdb := &mgetCounter{Client: raw}
	clock := &testClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newSyncMaster(t, "master-1", rdb, clock)
	info := func(i int) *willowv1.NodeInfo {
		return &willowv1.NodeInfo{Id: fmt.Sprintf("n%02d", i), Role: "upload", Region: "a", Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
	}
	for i := range 20 {
		if _, err := s.Register(ctx, &willowv1.RegisterRequest{Node: info(i)}); err != nil {
			t.Fatal(err)
		}
	}
	reload := func(what string, wantKeys int64, wantEntries int) *view {
		t.Helper()
		rdb.keys.Store(0)
		v, err := s.refresh(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := rdb.keys.Load(); got != wantKeys {
			t.Errorf("%s: read %d keys, want %d", what, got, wantKeys)
		}
		if len(v.entries) != wantEntries {
			t.Fatalf("%s: %d entries, want %d", what, len(v.entries), wantEntries)
		}
		for i := 1; i < len(v.entries); i++ {
			if v.entries[i-1].info.GetId() >= v.entries[i].info.GetId() {
				t.Fatalf("%s: entries not in ID order", what)
			}
		}
		return v
	}
	byID := func(v *view, id string) *entry {
		for _, e := range v.entries {
			if e.info.GetId() == id {
				return e
			}
		}
		return nil
	}
	reload("first load (whole)", 40, 20)
	reload("nothing changed", 0, 20)

	clock.add(time.Second)
	for _, i := range []int{3, 7} {
		if _, err := s.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info(i), Load: &willowv1.Load{InFlight: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	// This master's own heartbeats: taken from its writes, not read back.
	v := reload("two heartbeats of this master", 0, 20)
	if e := byID(v, "n03"); e.load.GetInFlight() != 5 || e.lastMs != clock.now().UnixMilli() {
		t.Fatalf("n03 after its heartbeat: in flight %d, last %d", e.load.GetInFlight(), e.lastMs)
	}
	if e := byID(v, "n04"); e.load.GetInFlight() != 0 {
		t.Fatalf("n04 changed without a heartbeat: %v", e.load)
	}
	// ...unless something else changed the entry since the last load: a
	// health judgement written between the last load and this master's
	// heartbeat (the change log keeps the latest change only) is read.
	if err := s.writeHealth(ctx, map[string]health{"n07": {State: StateEjected, SinceMs: 1, Reason: "test"}}); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Second)
	if _, err := s.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info(7), Load: &willowv1.Load{InFlight: 6}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info(3), Load: &willowv1.Load{InFlight: 4}}); err != nil {
		t.Fatal(err)
	}
	v = reload("a health write, then this master's heartbeat", 2, 20)
	if e := byID(v, "n07"); e.h.State != StateEjected || e.load.GetInFlight() != 6 {
		t.Fatalf("n07 after a health write and a heartbeat: %q, in flight %d; want ejected, 6", e.h.State, e.load.GetInFlight())
	}
	if e := byID(v, "n03"); e.load.GetInFlight() != 4 {
		t.Fatalf("n03 after its second heartbeat: in flight %d, want 4", e.load.GetInFlight())
	}
	// The judgement stays with the entry through this master's next
	// heartbeats.
	clock.add(time.Second)
	if _, err := s.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info(7), Load: &willowv1.Load{InFlight: 2}}); err != nil {
		t.Fatal(err)
	}
	v = reload("this master's heartbeat of an ejected node", 0, 20)
	if e := byID(v, "n07"); e.h.State != StateEjected || e.load.GetInFlight() != 2 {
		t.Fatalf("n07 after another heartbeat: %q, in flight %d; want ejected, 2", e.h.State, e.load.GetInFlight())
	}

	// Another master's writes (a heartbeat, a new node) and the leader's
	// health writes are seen the same way.
	s2 := newSyncMaster(t, "master-2", rdb, clock)
	if _, err := s2.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info(11), Load: &willowv1.Load{InFlight: 9}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Register(ctx, &willowv1.RegisterRequest{Node: info(20)}); err != nil {
		t.Fatal(err)
	}
	v = reload("another master's heartbeat and registration", 4, 21)
	if byID(v, "n11").load.GetInFlight() != 9 || byID(v, "n20") == nil {
		t.Fatal("another master's writes not seen")
	}
	if err := s2.writeHealth(ctx, map[string]health{"n05": {State: StateEjected, SinceMs: 1, Reason: "test"}}); err != nil {
		t.Fatal(err)
	}
	v = reload("a health write", 2, 21)
	if st := byID(v, "n05").h.State; st != StateEjected {
		t.Fatalf("n05 after the health write: %q, want ejected", st)
	}

	// An expired entry signals nothing: the next full load finds it and
	// prunes it from the index and the change log.
	if err := raw.Del(ctx, s.nodeKey("n06")).Err(); err != nil {
		t.Fatal(err)
	}
	reload("expiry, before the full load", 0, 21)
	clock.add(regFullEvery)
	reload("full load", 42, 20)
	if in, _ := raw.SIsMember(ctx, s.key("nodes"), "n06").Result(); in {
		t.Error("expired n06 still in the index")
	}
	if err := raw.ZScore(ctx, s.regChangedKey(), "n06").Err(); err != redis.Nil {
		t.Errorf("expired n06 still in the change log: %v", err)
	}
	reload("after the full load", 0, 20)

	// Redis forgets everything: the sequence went back, so the next load
	// is whole and sees only what was written since.
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Register(ctx, &willowv1.RegisterRequest{Node: info(1)}); err != nil {
		t.Fatal(err)
	}
	reload("after a flush", 2, 1)
}
