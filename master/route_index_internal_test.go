package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// Route's index answers what a Route computed from the snapshot and this
// master's heartbeats would, without a build in the call while it has an
// index of the snapshot: a listed node that falls silent leaves the answer
// at once (and the route builder is asked for a build); a node left out
// for silence that heartbeats again is in from the builder's next build;
// a new snapshot installed without an index is indexed by the call; the
// clock going back has the builder build again.
func TestRouteIndexFollowsSnapshotAndHeartbeats(t *testing.T) {
	clock := &testClock{t: t0}
	s := &Server{cfg: Config{MissedAfter: 3 * time.Second, SuccessWindow: 5 * time.Second}, now: clock.now, hb: newHBShards()}
	s.routes.kick = make(chan struct{}, 1)
	s.view = &view{at: t0, entries: []*entry{
		mk("upload", "a", "a1", StateHealthy, 0, 0),
		mk("upload", "a", "a2", StateHealthy, 2*time.Second, 1), // silent for 2 s
		mk("upload", "b", "b1", StateHealthy, 4*time.Second, 0), // silent: left out
		mk("upload", "b", "b2", StateEjected, 0, 0),
		mk("compress", "a", "c1", "", 0, 0), // no judgement yet: healthy
	}}
	ctx := context.Background()
	show := func(role, region string) (string, *routeIdx) {
		t.Helper()
		idx, err := s.routeIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := idx.answer(role, region, 0, clock.now(), s.hb.seenMs)
		if err != nil {
			return rpcstatus.Reason(err), idx
		}
		return fmt.Sprintf("%s %v %s %v", resp.GetPrimaryRegion(), ids(resp.GetPrimary()), resp.GetSecondaryRegion(), ids(resp.GetSecondary())), idx
	}
	check := func(what, role, region, want string) *routeIdx {
		t.Helper()
		got, idx := show(role, region)
		if got != want {
			t.Fatalf("%s: Route %s/%s = %s, want %s", what, role, region, got, want)
		}
		return idx
	}
	first := check("start", "upload", "a", "a [a1 a2]  []")
	check("start", "compress", "b", "a [c1]  []")
	if _, idx := show("upload", "b"); idx != first {
		t.Fatal("index rebuilt with nothing changed")
	}
	if got, _ := show("upload", "b"); got != "a [a1 a2]  []" {
		t.Fatalf("caller in b without healthy node there: %s", got)
	}

	// a2 falls silent past MissedAfter: out at once, from the same index;
	// the builder is asked for a new one.
	clock.add(1001 * time.Millisecond)
	if idx := check("a2 silent 3 s", "upload", "a", "a [a1]  []"); idx != first {
		t.Fatal("Route built the index itself")
	}
	if len(s.routes.kick) != 1 {
		t.Fatal("route builder not asked for a build")
	}
	<-s.routes.kick
	s.rebuildRoutes()
	if idx := check("a2 silent 3 s, built", "upload", "a", "a [a1]  []"); idx == first {
		t.Fatal("route builder did not build")
	}

	// b1 heartbeats to this master: back in at once.
	if _, _, _, err := s.encodeRecord(&willowv1.NodeInfo{Id: "b1", Role: "upload", Region: "b", Addr: "b1:1"}, &willowv1.Load{}, clock.now()); err != nil {
		t.Fatal(err)
	}
	s.routeHeartbeat("b1")
	if len(s.routes.kick) != 1 {
		t.Fatal("route builder not asked for a build after b1's heartbeat")
	}
	<-s.routes.kick
	check("b1 heartbeat, not built yet", "upload", "a", "a [a1]  []")
	s.rebuildRoutes()
	check("b1 heartbeat", "upload", "a", "a [a1] b [b1]")

	// A new snapshot replaces the index.
	s.mu.Lock()
	s.view = &view{at: clock.now(), entries: []*entry{mk("upload", "c", "c9", StateHealthy, -time.Second, 0)}}
	s.mu.Unlock()
	check("new snapshot", "upload", "a", "c [c9]  []")
	check("new snapshot", "compress", "a", ReasonNoHealthyNodes)

	// The clock goes back before the index was built: built again.
	built := s.routes.idx.Load()
	clock.add(-time.Minute)
	show("upload", "c")
	s.rebuildRoutes()
	if _, idx := show("upload", "c"); idx == built {
		t.Fatal("index kept after the clock went back")
	}
}

// TestRouteWireDecodesAsAnswer: the encoded answer Route sends (the
// index's shared encoding, or one made for the call while a listed node
// has fallen silent) decodes as the answer computed from the index, for
// a caller in a listed region, in another, with none, and for a role
// without a healthy node.
func TestRouteWireDecodesAsAnswer(t *testing.T) {
	clock := &testClock{t: t0}
	s := &Server{cfg: Config{MissedAfter: 3 * time.Second, SuccessWindow: 5 * time.Second}, now: clock.now, hb: newHBShards()}
	s.routes.kick = make(chan struct{}, 1)
	s.view = &view{at: t0, entries: []*entry{
		mk("upload", "a", "a1", StateHealthy, 0, 0),
		mk("upload", "a", "a2", StateHealthy, 2*time.Second, 1), // silent past MissedAfter in 1 s
		mk("upload", "b", "b1", StateHealthy, 0, 2),
		mk("upload", "c", "c1", StateHealthy, 0, 0),
	}}
	idx, err := s.routeIndex(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, role, region string, perList int) {
		t.Helper()
		want, werr := idx.answer(role, region, perList, clock.now(), s.hb.seenMs)
		b, err := idx.wire(role, region, perList, clock.now(), s.hb.seenMs)
		if werr != nil || err != nil {
			if rpcstatus.Reason(err) != rpcstatus.Reason(werr) || rpcstatus.Reason(err) == "" {
				t.Fatalf("%s: wire error %v, answer error %v", what, err, werr)
			}
			return
		}
		sent := &willowv1.RouteResponse{TtlMs: 5000}
		sent.ProtoReflect().SetUnknown(b)
		raw, err := proto.Marshal(sent)
		if err != nil {
			t.Fatal(err)
		}
		got := &willowv1.RouteResponse{}
		if err := proto.Unmarshal(raw, got); err != nil {
			t.Fatal(err)
		}
		want = proto.Clone(want).(*willowv1.RouteResponse)
		want.TtlMs = 5000
		if !proto.Equal(got, want) || len(got.GetPrimary()) == 0 {
			t.Fatalf("%s: Route %s/%s decodes as %v, want %v", what, role, region, got, want)
		}
	}
	for _, region := range []string{"a", "b", "z", ""} {
		for _, perList := range []int{0, 1, 2, 3} {
			check("all alive", "upload", region, perList)
			check("all alive, shared encoding", "upload", region, perList)
		}
	}
	check("no healthy node", "compress", "a", 0)
	clock.add(1001 * time.Millisecond) // a2 silent: left out at answer time
	check("a2 silent", "upload", "a", 0)
	check("a2 silent, one a list", "upload", "a", 1)
	if got, _ := idx.answer("upload", "a", 0, clock.now(), s.hb.seenMs); len(got.GetPrimary()) != 1 {
		t.Fatalf("a2 silent: primary %v, want a1 only", ids(got.GetPrimary()))
	}
}
