package master

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// route is the Route answer computed from the registry entries alone,
// without the index (route_index.go answers the same): the tests' statement
// of Route. Only nodes that heartbeat and are judged healthy are listed.
// Primary is the caller's region when it has a healthy node, otherwise the
// region with the most healthy nodes (reason says why); secondary is the
// best other region, so the two lists never share a region. It fails with UNAVAILABLE
// (reason no_healthy_nodes) when no node of the role is healthy.
func route(entries []*entry, now time.Time, missedAfter time.Duration, role, region string) (*willowv1.RouteResponse, error) {
	return groupRoutes(entries, now, missedAfter, role).answer(role, region, 0)
}

// groupRoutes lists the nodes of role in entries that heartbeat and are
// judged healthy at now.
func groupRoutes(entries []*entry, now time.Time, missedAfter time.Duration, role string) *roleRoutes {
	byRegion := map[string][]*entry{}
	for _, e := range entries {
		if e.info.GetRole() != role {
			continue
		}
		if st, _, _ := e.state(now, missedAfter); st != StateHealthy {
			continue
		}
		byRegion[e.info.GetRegion()] = append(byRegion[e.info.GetRegion()], e)
	}
	return newRoleRoutes(byRegion, func(*entry) int64 { return 0 }) // no deadlines: the tests do not expire them
}

// answer is the index's Route answer for role and region at now, each
// list cut to perList endpoints (0: every one), decoded as Route's
// callers see it (Flex and TtlMs unset): Route sends the same routes
// encoded (routeIdx.wire).
func (idx *routeIdx) answer(role, region string, perList int, now time.Time, seen func(id string) int64) (*willowv1.RouteResponse, error) {
	return idx.live(role, now, seen).answer(role, region, perList)
}

var t0 = time.UnixMilli(1_700_000_000_000)

// mk builds a registry entry: role, region, id, state and seconds since
// the last heartbeat.
func mk(role, region, id, state string, silentFor time.Duration, inFlight int32) *entry {
	return &entry{
		info:   &willowv1.NodeInfo{Id: id, Role: role, Region: region, Addr: id + ":1", HttpAddr: id + ":80", Capacity: 1},
		load:   &willowv1.Load{InFlight: inFlight},
		lastMs: t0.Add(-silentFor).UnixMilli(),
		h:      health{State: state},
	}
}

func ids(es []*willowv1.Endpoint) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.GetNodeId())
	}
	return out
}

func TestRouteNeverSameRegionTwice(t *testing.T) {
	const dead = 5 * time.Second
	tests := []struct {
		name         string
		entries      []*entry
		region       string
		wantPrimary  []string
		wantSecond   []string
		wantPRegion  string
		wantSRegion  string
		wantReason   bool
		wantNoRoutes bool
	}{
		{
			name: "two regions, least loaded first",
			entries: []*entry{
				mk("upload", "a", "a1", StateHealthy, 0, 5), mk("upload", "a", "a2", StateHealthy, 0, 1),
				mk("upload", "b", "b1", StateHealthy, 0, 0), mk("compress", "a", "c1", StateHealthy, 0, 0),
			},
			region: "a", wantPrimary: []string{"a2", "a1"}, wantSecond: []string{"b1"}, wantPRegion: "a", wantSRegion: "b",
		},
		{
			name:    "one region only: no secondary",
			entries: []*entry{mk("upload", "a", "a1", StateHealthy, 0, 0), mk("upload", "a", "a2", StateHealthy, 0, 0)},
			region:  "a", wantPrimary: []string{"a1", "a2"}, wantPRegion: "a",
		},
		{
			name:    "one other region only: primary elsewhere, no secondary",
			entries: []*entry{mk("upload", "b", "b1", StateHealthy, 0, 0)},
			region:  "a", wantPrimary: []string{"b1"}, wantPRegion: "b", wantReason: true,
		},
		{
			name: "caller region all ejected or dead",
			entries: []*entry{
				mk("upload", "a", "a1", StateEjected, 0, 0), mk("upload", "a", "a2", StateHealthy, dead, 0),
				mk("upload", "a", "a3", StateProbing, 0, 0),
				mk("upload", "b", "b1", StateHealthy, 0, 0), mk("upload", "c", "c1", StateHealthy, 0, 0),
				mk("upload", "c", "c2", StateHealthy, 0, 0),
			},
			region: "a", wantPrimary: []string{"c1", "c2"}, wantSecond: []string{"b1"}, wantPRegion: "c", wantSRegion: "b", wantReason: true,
		},
		{
			name: "dead and ejected nodes are left out",
			entries: []*entry{
				mk("upload", "a", "a1", StateHealthy, dead, 0), mk("upload", "a", "a2", StateHealthy, 0, 0),
				mk("upload", "b", "b1", StateEjected, 0, 0), mk("upload", "b", "b2", StateHealthy, 0, 0),
			},
			region: "a", wantPrimary: []string{"a2"}, wantSecond: []string{"b2"}, wantPRegion: "a", wantSRegion: "b",
		},
		{
			name:    "unknown caller region",
			entries: []*entry{mk("upload", "a", "a1", StateHealthy, 0, 0), mk("upload", "b", "b1", StateHealthy, 0, 0)},
			region:  "", wantPrimary: []string{"a1"}, wantSecond: []string{"b1"}, wantPRegion: "a", wantSRegion: "b", wantReason: true,
		},
		{
			name:         "nothing healthy",
			entries:      []*entry{mk("upload", "a", "a1", StateEjected, 0, 0), mk("upload", "b", "b1", StateHealthy, dead, 0)},
			region:       "a",
			wantNoRoutes: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := route(tt.entries, t0, 3*time.Second, "upload", tt.region)
			if tt.wantNoRoutes {
				if rpcstatus.Reason(err) != ReasonNoHealthyNodes {
					t.Fatalf("err = %v, want no_healthy_nodes", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, e := range resp.GetPrimary() {
				seen[e.GetRegion()] = true
				if e.GetRegion() != resp.GetPrimaryRegion() {
					t.Errorf("primary endpoint %s in region %s, primary region %s", e.GetNodeId(), e.GetRegion(), resp.GetPrimaryRegion())
				}
			}
			for _, e := range resp.GetSecondary() {
				if seen[e.GetRegion()] {
					t.Fatalf("region %s in both lists: %v", e.GetRegion(), resp)
				}
			}
			if got := ids(resp.GetPrimary()); !equal(got, tt.wantPrimary) {
				t.Errorf("primary = %v, want %v", got, tt.wantPrimary)
			}
			if got := ids(resp.GetSecondary()); !equal(got, tt.wantSecond) {
				t.Errorf("secondary = %v, want %v", got, tt.wantSecond)
			}
			if resp.GetPrimaryRegion() != tt.wantPRegion || resp.GetSecondaryRegion() != tt.wantSRegion {
				t.Errorf("regions = %q/%q, want %q/%q", resp.GetPrimaryRegion(), resp.GetSecondaryRegion(), tt.wantPRegion, tt.wantSRegion)
			}
			if (resp.GetReason() != "") != tt.wantReason {
				t.Errorf("reason = %q, want reason %v", resp.GetReason(), tt.wantReason)
			}
			if len(resp.GetPrimary()) > 0 && resp.GetPrimary()[0].GetHttpAddr() == "" {
				t.Error("endpoint without http_addr")
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMaxEjected(t *testing.T) {
	for _, tt := range []struct {
		n    int
		frac float64
		want int
	}{
		{0, 1.0 / 3, 0}, {1, 1.0 / 3, 0}, {2, 1.0 / 3, 1}, {3, 1.0 / 3, 1}, {5, 1.0 / 3, 1},
		{6, 1.0 / 3, 2}, {9, 1.0 / 3, 3}, {2, 1, 1}, {4, 0.5, 2}, {10, 0.01, 1},
	} {
		if got := maxEjected(tt.n, tt.frac); got != tt.want {
			t.Errorf("maxEjected(%d, %v) = %d, want %d", tt.n, tt.frac, got, tt.want)
		}
	}
}

func testConfig() Config {
	c := Config{}
	if err := c.applyDefaults(); err != nil {
		panic(err)
	}
	return c
}

// bad gives e a window of 40 requests with the given errors.
func bad(e *entry, errs int64) *entry {
	e.samples = []sample{{At: t0.UnixMilli() - 100, Req: 40, Err: errs}}
	return e
}

func TestJudge(t *testing.T) {
	c := testConfig()
	probeErr := errors.New("refused")
	nowMs := t0.UnixMilli()
	tests := []struct {
		name    string
		entries []*entry
		probed  map[string]error
		want    map[string]string // id -> state after judging
	}{
		{
			name: "half failing is ejected",
			entries: []*entry{bad(mk("upload", "a", "a1", StateHealthy, 0, 0), 20),
				mk("upload", "a", "a2", StateHealthy, 0, 0), mk("upload", "a", "a3", StateHealthy, 0, 0)},
			want: map[string]string{"a1": StateEjected, "a2": StateHealthy, "a3": StateHealthy},
		},
		{
			name:    "too few requests is no judgement",
			entries: []*entry{mk("upload", "a", "a1", StateHealthy, 0, 0), mk("upload", "a", "a2", StateHealthy, 0, 0)},
			want:    map[string]string{"a1": StateHealthy, "a2": StateHealthy},
		},
		{
			name: "at most a third of a region for bad health",
			entries: []*entry{bad(mk("upload", "a", "a1", StateHealthy, 0, 0), 40), bad(mk("upload", "a", "a2", StateHealthy, 0, 0), 30),
				bad(mk("upload", "a", "a3", StateHealthy, 0, 0), 30), bad(mk("upload", "b", "b1", StateHealthy, 0, 0), 40),
				mk("upload", "b", "b2", StateHealthy, 0, 0)},
			want: map[string]string{"a1": StateEjected, "a2": StateHealthy, "a3": StateHealthy, "b1": StateEjected, "b2": StateHealthy},
		},
		{
			name:    "lone node is not ejected for bad health",
			entries: []*entry{bad(mk("upload", "a", "a1", StateHealthy, 0, 0), 40)},
			want:    map[string]string{"a1": StateHealthy},
		},
		{
			name: "dead nodes always leave, beyond the budget",
			entries: []*entry{mk("upload", "a", "a1", StateHealthy, 4*time.Second, 0), mk("upload", "a", "a2", StateHealthy, 4*time.Second, 0),
				mk("upload", "a", "a3", StateHealthy, 4*time.Second, 0)},
			want: map[string]string{"a1": StateEjected, "a2": StateEjected, "a3": StateEjected},
		},
		{
			name: "repeated probe failures eject",
			entries: []*entry{func() *entry {
				e := mk("upload", "a", "a1", StateHealthy, 0, 0)
				e.h.ProbeFail = c.ProbeFailures - 1
				return e
			}(), mk("upload", "a", "a2", StateHealthy, 0, 0)},
			probed: map[string]error{"a1": probeErr, "a2": nil},
			want:   map[string]string{"a1": StateEjected, "a2": StateHealthy},
		},
		{
			name: "protection window holds even with good probes",
			entries: []*entry{func() *entry {
				e := mk("upload", "a", "a1", StateEjected, 0, 0)
				e.h.ProtectUntilMs = nowMs + 1
				return e
			}()},
			probed: map[string]error{"a1": nil},
			want:   map[string]string{"a1": StateEjected},
		},
		{
			name: "after protection: probing",
			entries: []*entry{func() *entry {
				e := mk("upload", "a", "a1", StateEjected, 0, 0)
				e.h.ProtectUntilMs = nowMs
				return e
			}()},
			probed: map[string]error{"a1": nil},
			want:   map[string]string{"a1": StateProbing},
		},
		{
			name: "probing: a run of good probes re-admits",
			entries: []*entry{func() *entry {
				e := mk("upload", "a", "a1", StateProbing, 0, 0)
				e.h.ProbeOK = c.ProbeSuccesses - 1
				return e
			}()},
			probed: map[string]error{"a1": nil},
			want:   map[string]string{"a1": StateHealthy},
		},
		{
			name: "probing: a failed probe ejects again",
			entries: []*entry{func() *entry {
				e := mk("upload", "a", "a1", StateProbing, 0, 0)
				e.h.ProbeOK = c.ProbeSuccesses - 1
				return e
			}()},
			probed: map[string]error{"a1": probeErr},
			want:   map[string]string{"a1": StateEjected},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := c.judge(tt.entries, tt.probed, t0, true)
			for _, e := range tt.entries {
				got := e.h.State
				if h, ok := changed[e.info.GetId()]; ok {
					got = h.State
				}
				if got != tt.want[e.info.GetId()] {
					t.Errorf("%s: state %s, want %s (%+v)", e.info.GetId(), got, tt.want[e.info.GetId()], changed[e.info.GetId()])
				}
			}
		})
	}
}

func TestFlappingDoublesProtection(t *testing.T) {
	c := testConfig()
	e := bad(mk("upload", "a", "a1", StateHealthy, 0, 0), 40)
	others := []*entry{mk("upload", "a", "a2", StateHealthy, 0, 0), mk("upload", "a", "a3", StateHealthy, 0, 0)}
	var got []time.Duration
	for range 3 {
		h := c.judge(append([]*entry{e}, others...), nil, t0, true)["a1"]
		if h.State != StateEjected {
			t.Fatalf("state %s, want ejected", h.State)
		}
		got = append(got, time.Duration(h.ProtectUntilMs-h.SinceMs)*time.Millisecond)
		// It recovers, then fails again soon after.
		h.State, h.RecoveredMs, h.SinceMs = StateHealthy, t0.UnixMilli()-1000, t0.UnixMilli()-1000
		e.h = h
	}
	want := []time.Duration{c.Protection, 2 * c.Protection, 4 * c.Protection}
	if !equalDur(got, want) {
		t.Fatalf("protection windows %v, want %v", got, want)
	}
}

func equalDur(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestJudgeWaitsAfterRedisReturns(t *testing.T) {
	c := testConfig()
	es := []*entry{mk("upload", "a", "a1", StateHealthy, 4*time.Second, 0), mk("upload", "a", "a2", StateHealthy, 0, 0)}
	if changed := c.judge(es, nil, t0, false); len(changed) != 0 {
		t.Fatalf("judged %v while heartbeats may be missing from Redis", changed)
	}
	if h := c.judge(es, nil, t0, true)["a1"]; h.State != StateEjected || h.Reason != ReasonMissedHeartbeats {
		t.Fatalf("dead node judged %+v, want ejected for missed heartbeats", h)
	}
}

func BenchmarkRoute(b *testing.B) {
	var es []*entry
	for i := range 300 {
		region := string(rune('a' + i%3))
		es = append(es, mk("upload", region, fmt.Sprintf("u-%s-%d", region, i), StateHealthy, 0, int32(i%17)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := route(es, t0, 3*time.Second, "upload", "a"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRouteMaxPerList: a capped answer is each list's least loaded
// endpoints, both lists still from different regions; a cap no shorter
// than the longest list is the answer with every endpoint, byte for byte;
// the index keeps the encodings of small caps only.
func TestRouteMaxPerList(t *testing.T) {
	entries := []*entry{
		mk("upload", "a", "a1", StateHealthy, 0, 5), mk("upload", "a", "a2", StateHealthy, 0, 1),
		mk("upload", "a", "a3", StateHealthy, 0, 3),
		mk("upload", "b", "b1", StateHealthy, 0, 0), mk("upload", "b", "b2", StateHealthy, 0, 2),
		mk("upload", "c", "c1", StateHealthy, 0, 0),
	}
	for i := range 2 * routeWireCacheMax { // a long list in region d
		entries = append(entries, mk("upload", "d", fmt.Sprintf("d%02d", i), StateHealthy, 0, int32(i)))
	}
	r := groupRoutes(entries, t0, 3*time.Second, "upload")
	for _, tt := range []struct {
		region, wantP, wantS string
		perList              int
	}{
		{"a", "a2 a3", "d00 d01", 2},
		{"a", "a2", "d00", 1}, // d has the most nodes: the best other region
		{"b", "b1", "d00", 1},
		{"a", "a2 a3 a1", strings.Join(ids(r.eps["d"]), " "), 0},
	} {
		resp, err := r.answer("upload", tt.region, tt.perList)
		if err != nil {
			t.Fatal(err)
		}
		if p, s := strings.Join(ids(resp.GetPrimary()), " "), strings.Join(ids(resp.GetSecondary()), " "); p != tt.wantP || s != tt.wantS {
			t.Errorf("%s, %d a list: primary %q secondary %q, want %q %q", tt.region, tt.perList, p, s, tt.wantP, tt.wantS)
		}
		if resp.GetPrimaryRegion() == resp.GetSecondaryRegion() {
			t.Errorf("%s, %d a list: both lists in region %s", tt.region, tt.perList, resp.GetPrimaryRegion())
		}
	}
	all, err := r.wire("upload", "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, perList := range []int{2 * routeWireCacheMax, MaxRoutePerList} {
		if b, _ := r.wire("upload", "a", perList); string(b) != string(all) {
			t.Errorf("a cap of %d (longest list %d): not the answer with every endpoint", perList, 2*routeWireCacheMax)
		}
	}
	for _, tt := range []struct {
		perList int
		kept    bool
	}{{1, true}, {routeWireCacheMax, true}, {routeWireCacheMax + 1, false}} {
		if _, err := r.wire("upload", "a", tt.perList); err != nil {
			t.Fatal(err)
		}
		if _, kept := r.wires.Load(wireKey{"a", tt.perList}); kept != tt.kept {
			t.Errorf("cap %d: encoding kept %v, want %v", tt.perList, kept, tt.kept)
		}
	}
}

// BenchmarkRouteIndexBuild: the index of a 5000-node snapshot (five
// roles, three regions, moving loads), as refresh builds it four times a
// second with this master's heartbeats of every node.
func BenchmarkRouteIndexBuild(b *testing.B) {
	s := &Server{cfg: Config{MissedAfter: 3 * time.Second}, hb: newHBShards()}
	roles := []string{"upload", "upload", "edgecache", "edgecache", "compress"}
	v := &view{at: t0}
	for i := range 5000 {
		e := mk(roles[i%len(roles)], string(rune('a'+i%3)), fmt.Sprintf("sim-%05d", i), StateHealthy, time.Duration(i%1000)*time.Millisecond, int32(i%40))
		e.load.QueueMs = float64(i % 23)
		v.entries = append(v.entries, e)
		sh := s.hb.shard(e.info.GetId())
		sh.nodes[e.info.GetId()] = &hbNode{seen: e.lastMs + 200}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.buildRouteIndex(v, t0)
	}
}
