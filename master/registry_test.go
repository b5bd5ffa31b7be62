package master_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// regMaster is a master on its own node.
type regMaster struct {
	addr   string
	node   *node.Node
	srv    *master.Server
	client willowv1.MasterClient
	stop   func() // stops its gRPC server and background work
}

func startRegMaster(t *testing.T, rdb redis.UniversalClient, id string, cfg master.Config, prober master.Prober) *regMaster {
	t.Helper()
	n, err := node.New(node.Config{ID: id, Role: "master", ShutdownGrace: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OncallToken == "" {
		cfg.OncallToken = "t"
	}
	s, err := master.New(cfg, master.Deps{Node: n, Redis: rdb, Prober: prober})
	if err != nil {
		t.Fatal(err)
	}
	stop := runUntilCleanup(t, n.Run, s.Run)
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &regMaster{addr: n.Addr(), node: n, srv: s, client: willowv1.NewMasterClient(conn), stop: stop}
}

// runUntilCleanup runs each of runs (a node's or a master's Run) on its
// own goroutine until the test ends, or until stop, which returns once
// they all have.
func runUntilCleanup(t *testing.T, runs ...func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// quiet logs only errors, and only with -v.
func quiet() *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// flaky is a service a test node serves: GetFlex fails every other call
// while failing is set.
type flaky struct {
	willowv1.UnimplementedMasterServer
	failing atomic.Bool
	n       atomic.Int64
}

func (f *flaky) GetFlex(ctx context.Context, _ *willowv1.GetFlexRequest) (*willowv1.FlexState, error) {
	if f.failing.Load() && f.n.Add(1)%2 == 0 {
		return nil, status.Error(codes.Internal, "flaky")
	}
	return &willowv1.FlexState{}, nil
}

type regNode struct {
	id     string
	node   *node.Node
	svc    *flaky
	client willowv1.MasterClient // the node's own flaky service
	stop   func()
}

func startRegNode(t *testing.T, masterAddr, id, role, region string) *regNode {
	t.Helper()
	n, err := node.New(node.Config{ID: id, Role: role, Region: region, MasterAddr: masterAddr,
		HeartbeatInterval: 100 * time.Millisecond, ShutdownGrace: time.Second, HTTPAddr: "127.0.0.1:1", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	svc := &flaky{}
	willowv1.RegisterMasterServer(n.Server(), svc)
	if err := n.Guard().Declare(master.Methods()); err != nil {
		t.Fatal(err)
	}
	stop := runUntilCleanup(t, n.Run)
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &regNode{id: id, node: n, svc: svc, client: willowv1.NewMasterClient(conn), stop: stop}
}

// routeIDs returns the node IDs of both lists, or nil on error.
func routeIDs(ctx context.Context, c willowv1.MasterClient, role, region string) (primary, secondary []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.Route(ctx, &willowv1.RouteRequest{Role: role, Region: region})
	if err != nil {
		return nil, nil, err
	}
	for _, e := range resp.GetPrimary() {
		primary = append(primary, e.GetNodeId())
	}
	for _, e := range resp.GetSecondary() {
		secondary = append(secondary, e.GetNodeId())
	}
	return primary, secondary, nil
}

func inRoute(c willowv1.MasterClient, role, region, id string) bool {
	p, s, _ := routeIDs(context.Background(), c, role, region)
	for _, x := range append(p, s...) {
		if x == id {
			return true
		}
	}
	return false
}

func nodeState(t *testing.T, c willowv1.MasterClient, id string) *willowv1.NodeStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.ListNodes(ctx, &willowv1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range resp.GetNodes() {
		if n.GetNode().GetId() == id {
			return n
		}
	}
	return nil
}

// regWait polls cond every 20 ms until it holds or d passes.
func regWait(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func regConfig() master.Config {
	return master.Config{
		SuccessWindow: time.Second, Protection: 600 * time.Millisecond, ProbeInterval: 50 * time.Millisecond,
		RefreshInterval: 50 * time.Millisecond, LeaseTTL: 500 * time.Millisecond,
	}
}

func TestDeadNodeLeavesRouteWithin3s(t *testing.T) {
	for _, tt := range []struct {
		name   string
		prober master.Prober
	}{
		{"probes and heartbeats", nil},
		{"heartbeats only", okProber{}}, // the master's probes cannot tell
	} {
		t.Run(tt.name, func(t *testing.T) { testDeadNode(t, tt.prober) })
	}
}

// okProber says every node is fine.
type okProber struct{}

func (okProber) Probe(context.Context, string) error { return nil }

func testDeadNode(t *testing.T, prober master.Prober) {
	rdb := testenv.StartRedis(t).Client(t)
	cfg := regConfig()
	cfg.MissedAfter = 0 // the default, 3 s
	m := startRegMaster(t, rdb, "master-1", cfg, prober)
	a1 := startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	startRegNode(t, m.addr, "upload-a-2", "upload", "a")
	startRegNode(t, m.addr, "upload-b-1", "upload", "b")
	regWait(t, 5*time.Second, "three nodes in Route", func() bool {
		p, s, _ := routeIDs(context.Background(), m.client, "upload", "a")
		return len(p) == 2 && len(s) == 1
	})
	died := time.Now()
	a1.stop() // the process is gone: no gRPC server, no heartbeats
	regWait(t, 4*time.Second, "upload-a-1 out of Route", func() bool { return !inRoute(m.client, "upload", "a", "upload-a-1") })
	took := time.Since(died)
	// It leaves MissedAfter after its last heartbeat, which came before it
	// died; the slack is this test's 20 ms polling.
	if took > 3*time.Second+50*time.Millisecond {
		t.Fatalf("dead node left Route after %v, want within 3 s", took)
	}
	t.Logf("dead node left Route after %v", took)
	if st := nodeState(t, m.client, "upload-a-1"); st.GetState() != master.StateEjected {
		t.Fatalf("dead node state %q, want ejected", st.GetState())
	}
}

// switchProber fails every probe while fail is set, and otherwise
// delegates to real gRPC health checks.
type switchProber struct {
	fail atomic.Bool
	real master.Prober
}

func (p *switchProber) Probe(ctx context.Context, addr string) error {
	if p.fail.Load() {
		return errors.New("probe switched off")
	}
	return p.real.Probe(ctx, addr)
}

// healthProber is a real gRPC health check, as the master makes by default.
type healthProber struct{}

func (healthProber) Probe(ctx context.Context, addr string) error {
	conn, err := node.Dial(addr, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		err = errors.New(resp.GetStatus().String())
	}
	return err
}

// drive sends n calls to the node's flaky service.
func drive(ctx context.Context, nd *regNode, n int) {
	for range n {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = nd.client.GetFlex(cctx, &willowv1.GetFlexRequest{})
		cancel()
	}
}

func TestFailingNodeEjectedAndProbedBack(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	cfg := regConfig()
	prober := &switchProber{real: healthProber{}}
	m := startRegMaster(t, rdb, "master-1", cfg, prober)
	bad := startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	startRegNode(t, m.addr, "upload-a-2", "upload", "a")
	startRegNode(t, m.addr, "upload-a-3", "upload", "a")
	regWait(t, 5*time.Second, "nodes in Route", func() bool {
		p, _, _ := routeIDs(context.Background(), m.client, "upload", "a")
		return len(p) == 3
	})

	bad.svc.failing.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			drive(ctx, bad, 10)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	regWait(t, 5*time.Second, "failing node ejected", func() bool {
		return nodeState(t, m.client, "upload-a-1").GetState() == master.StateEjected
	})
	ejectedAt := time.Now()
	st := nodeState(t, m.client, "upload-a-1")
	t.Logf("ejected: %s", st.GetReason())
	if !strings.HasPrefix(st.GetReason(), master.ReasonSuccessRate) {
		t.Fatalf("ejected for %q, want %s", st.GetReason(), master.ReasonSuccessRate)
	}
	if inRoute(m.client, "upload", "a", "upload-a-1") {
		t.Fatal("ejected node still in Route")
	}

	// The node is good again, but probes fail: it must stay out past its
	// protection window, not come back on its first good heartbeat.
	cancel()
	bad.svc.failing.Store(false)
	prober.fail.Store(true)
	time.Sleep(3 * cfg.Protection)
	if s := nodeState(t, m.client, "upload-a-1").GetState(); s == master.StateHealthy || inRoute(m.client, "upload", "a", "upload-a-1") {
		t.Fatalf("node back (state %s) while probes fail", s)
	}

	prober.fail.Store(false)
	regWait(t, 10*time.Second, "node re-admitted after probes pass", func() bool {
		return inRoute(m.client, "upload", "a", "upload-a-1")
	})
	if el := time.Since(ejectedAt); el < cfg.Protection {
		t.Fatalf("re-admitted %v after ejection, protection window %v", el, cfg.Protection)
	}
	if s := nodeState(t, m.client, "upload-a-1").GetState(); s != master.StateHealthy {
		t.Fatalf("state %s, want healthy", s)
	}
}

func TestMaxEjectionFraction(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startRegMaster(t, rdb, "master-1", regConfig(), nil)
	var nodes []*regNode
	for _, id := range []string{"upload-a-1", "upload-a-2", "upload-a-3"} {
		nodes = append(nodes, startRegNode(t, m.addr, id, "upload", "a"))
	}
	regWait(t, 5*time.Second, "nodes in Route", func() bool {
		p, _, _ := routeIDs(context.Background(), m.client, "upload", "a")
		return len(p) == 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, nd := range nodes[:2] { // two of three fail half their requests
		nd.svc.failing.Store(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				drive(ctx, nd, 10)
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	ejected := 0
	for _, nd := range nodes {
		if nodeState(t, m.client, nd.id).GetState() != master.StateHealthy {
			ejected++
		}
	}
	if ejected != 1 {
		t.Fatalf("%d of 3 nodes out, want exactly 1 (a third)", ejected)
	}
	p, _, _ := routeIDs(context.Background(), m.client, "upload", "a")
	if len(p) != 2 {
		t.Fatalf("Route primary %v, want 2 nodes", p)
	}
}

func TestTwoMastersShareState(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	cfg := regConfig()
	m1 := startRegMaster(t, rdb, "master-1", cfg, nil)
	time.Sleep(100 * time.Millisecond) // master-1 takes the lease
	m2 := startRegMaster(t, rdb, "master-2", cfg, nil)
	// Nodes reach the masters through one address (a Service or DNS name
	// in production); here they heartbeat to master-2.
	var regionA []*regNode
	for _, id := range []string{"upload-a-1", "upload-a-2"} {
		regionA = append(regionA, startRegNode(t, m2.addr, id, "upload", "a"))
	}
	startRegNode(t, m2.addr, "upload-b-1", "upload", "b")
	want := "[upload-a-1 upload-a-2]/[upload-b-1]"
	show := func(c willowv1.MasterClient) string {
		p, s, err := routeIDs(context.Background(), c, "upload", "a")
		if err != nil {
			return err.Error()
		}
		sort.Strings(p) // order follows load
		return fmtIDs(p) + "/" + fmtIDs(s)
	}
	regWait(t, 5*time.Second, "both masters route", func() bool { return show(m1.client) == want && show(m2.client) == want })

	// A drill ordered through master-1 reaches a node that heartbeats to
	// master-2.
	if _, err := m1.client.SetDrill(context.Background(), &willowv1.SetDrillRequest{Token: "t", ForMs: 2000,
		Drill: &willowv1.Drill{NodeAddr: "upload-a-2", Kind: "latency", LatencyMs: 1}}); err != nil {
		t.Fatal(err)
	}
	regWait(t, 2*time.Second, "drill via the other master", func() bool { return len(regionA[1].node.Drills()) == 1 })

	m1.stop() // kill master-1, the leader
	deadline := time.Now().Add(2 * cfg.LeaseTTL)
	for time.Now().Before(deadline) {
		if got := show(m2.client); got != want {
			t.Fatalf("after master-1 died, master-2 routes %s, want %s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// master-2 took over judging: a failing node is still ejected.
	bad := regionA[0]
	bad.svc.failing.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			drive(ctx, bad, 10)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	regWait(t, 5*time.Second, "master-2 ejects the failing node", func() bool {
		return nodeState(t, m2.client, bad.id).GetState() == master.StateEjected
	})
	cancel()
	want = "[upload-a-2]/[upload-b-1]"
	regWait(t, time.Second, "master-2 routes around it", func() bool { return show(m2.client) == want })
	// A restarted master loses nothing: it answers at once from Redis.
	m3 := startRegMaster(t, rdb, "master-3", cfg, nil)
	if got := show(m3.client); got != want {
		t.Fatalf("fresh master routes %s, want %s", got, want)
	}
}

func fmtIDs(ids []string) string {
	s := "["
	for i, id := range ids {
		if i > 0 {
			s += " "
		}
		s += id
	}
	return s + "]"
}

func TestDrills(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	cfg := regConfig()
	cfg.MissedAfter = 500 * time.Millisecond
	m := startRegMaster(t, rdb, "master-1", cfg, nil)
	nd := startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	startRegNode(t, m.addr, "upload-b-1", "upload", "b")
	regWait(t, 5*time.Second, "nodes in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
	ctx := context.Background()

	_, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "wrong", ForMs: 1000,
		Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "errors", ErrorRatio: 1}})
	if status.Code(err) != codes.Unauthenticated || rpcstatus.Reason(err) != auth.ReasonBadCredentials {
		t.Fatalf("drill with a wrong token: %v, want UNAUTHENTICATED bad_credentials", err)
	}
	_, err = m.client.SetDrill(ctx, &willowv1.SetDrillRequest{ForMs: 1000,
		Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "errors", ErrorRatio: 1}})
	if status.Code(err) != codes.Unauthenticated || rpcstatus.Reason(err) != auth.ReasonNoCredentials {
		t.Fatalf("drill without token: %v, want UNAUTHENTICATED no_credentials (the same check as flex)", err)
	}
	for _, bad := range []*willowv1.SetDrillRequest{
		{Token: "t", ForMs: 1000, Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "meteor"}},
		{Token: "t", ForMs: 1000, Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "errors", ErrorRatio: 2}},
		{Token: "t", ForMs: 1000, Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "latency"}},
	} {
		if _, err := m.client.SetDrill(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("drill %v: %v, want INVALID_ARGUMENT", bad.GetDrill(), err)
		}
	}
	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 1000,
		Drill: &willowv1.Drill{NodeAddr: "nope:1", Kind: "silence"}}); status.Code(err) != codes.NotFound {
		t.Errorf("drill on unknown node: %v, want NOT_FOUND", err)
	}

	// Errors drill by address: every call fails until it expires.
	resp, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 1500,
		Drill: &willowv1.Drill{NodeAddr: nd.node.Addr(), Kind: "errors", ErrorRatio: 1, Actor: "test", Reason: "drill"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDrill().GetExpiresAtUnixMs() == 0 {
		t.Fatal("drill without expiry")
	}
	regWait(t, 2*time.Second, "errors drill on the node", func() bool {
		_, err := nd.client.GetFlex(ctx, &willowv1.GetFlexRequest{})
		return status.Code(err) == codes.Unavailable
	})
	ld, err := m.client.ListDrills(ctx, &willowv1.ListDrillsRequest{})
	if err != nil || len(ld.GetDrills()) != 1 {
		t.Fatalf("ListDrills = %v, %v; want one drill", ld, err)
	}
	regWait(t, 3*time.Second, "errors drill expired", func() bool {
		_, err := nd.client.GetFlex(ctx, &willowv1.GetFlexRequest{})
		return err == nil
	})
	regWait(t, 2*time.Second, "drill gone from ListDrills", func() bool {
		ld, err := m.client.ListDrills(ctx, &willowv1.ListDrillsRequest{})
		return err == nil && len(ld.GetDrills()) == 0
	})

	// Drills are audited, refused ones too.
	hist, err := m.client.FlexHistory(ctx, &willowv1.FlexHistoryRequest{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var accepted, refused int
	for _, e := range hist.GetEntries() {
		if e.GetAction() != "drill" {
			continue
		}
		if e.GetAccepted() {
			accepted++
		} else {
			refused++
		}
	}
	if accepted != 1 || refused != 6 {
		t.Fatalf("audit has %d accepted and %d refused drills, want 1 and 6", accepted, refused)
	}

	// Latency drill by node ID.
	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 2000,
		Drill: &willowv1.Drill{NodeAddr: "upload-a-1", Kind: "latency", LatencyMs: 300}}); err != nil {
		t.Fatal(err)
	}
	regWait(t, 2*time.Second, "latency drill on the node", func() bool {
		start := time.Now()
		_, _ = nd.client.GetFlex(ctx, &willowv1.GetFlexRequest{})
		return time.Since(start) >= 300*time.Millisecond
	})
	// Ending it early: for 0.
	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 0,
		Drill: &willowv1.Drill{NodeAddr: "upload-a-1", Kind: "latency"}}); err != nil {
		t.Fatal(err)
	}
	regWait(t, 2*time.Second, "latency drill ended", func() bool {
		start := time.Now()
		_, _ = nd.client.GetFlex(ctx, &willowv1.GetFlexRequest{})
		return time.Since(start) < 100*time.Millisecond
	})

	// Silence drill: heartbeats stop, the node leaves Route, and comes back
	// through probes after the drill expires.
	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 1000,
		Drill: &willowv1.Drill{NodeAddr: "upload-a-1", Kind: "silence"}}); err != nil {
		t.Fatal(err)
	}
	regWait(t, 3*time.Second, "silenced node out of Route", func() bool { return !inRoute(m.client, "upload", "a", "upload-a-1") })
	regWait(t, 5*time.Second, "silenced node back after the drill", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
}

// TestRouteMaxPerList: over gRPC, a capped Route lists at most that many
// endpoints a list, both lists from different regions; the caller's side
// that cannot be trusted (a cap below 0, above MaxRoutePerList, the
// largest int32) is refused with INVALID_ARGUMENT max_per_list before
// anything is looked up, and MaxRoutePerList itself is a valid cap.
func TestRouteMaxPerList(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startRegMaster(t, rdb, "master-1", regConfig(), okProber{})
	startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	startRegNode(t, m.addr, "upload-a-2", "upload", "a")
	startRegNode(t, m.addr, "upload-b-1", "upload", "b")
	startRegNode(t, m.addr, "upload-b-2", "upload", "b")
	regWait(t, 5*time.Second, "four nodes in Route", func() bool {
		p, s, _ := routeIDs(context.Background(), m.client, "upload", "a")
		return len(p) == 2 && len(s) == 2
	})
	ctx := context.Background()
	for _, perList := range []int32{1, master.MaxRoutePerList} {
		resp, err := m.client.Route(ctx, &willowv1.RouteRequest{Role: "upload", Region: "a", MaxPerList: perList})
		if err != nil {
			t.Fatalf("cap %d: %v", perList, err)
		}
		want := min(int(perList), 2)
		if len(resp.GetPrimary()) != want || len(resp.GetSecondary()) != want ||
			resp.GetPrimaryRegion() != "a" || resp.GetSecondaryRegion() != "b" {
			t.Errorf("cap %d: primary %d in %q, secondary %d in %q; want %d in a and %d in b", perList,
				len(resp.GetPrimary()), resp.GetPrimaryRegion(), len(resp.GetSecondary()), resp.GetSecondaryRegion(), want, want)
		}
	}
	for _, perList := range []int32{-1, master.MaxRoutePerList + 1, math.MaxInt32, math.MinInt32} {
		_, err := m.client.Route(ctx, &willowv1.RouteRequest{Role: "upload", Region: "a", MaxPerList: perList})
		if status.Code(err) != codes.InvalidArgument || rpcstatus.Reason(err) != master.ReasonMaxPerList {
			t.Errorf("cap %d: err = %v (reason %q), want INVALID_ARGUMENT max_per_list", perList, err, rpcstatus.Reason(err))
		}
	}
}

func TestRouteRidesOutRedisOutage(t *testing.T) {
	dir, port := t.TempDir(), testenv.FreePort(t)
	r := testenv.StartRedisAt(t, dir, port)
	rdb := r.Client(t)
	cfg := regConfig()
	cfg.MissedAfter = 500 * time.Millisecond
	m := startRegMaster(t, rdb, "master-1", cfg, nil)
	startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	startRegNode(t, m.addr, "upload-b-1", "upload", "b")
	want := "[upload-a-1]/[upload-b-1]"
	show := func() string {
		p, s, err := routeIDs(context.Background(), m.client, "upload", "a")
		if err != nil {
			return err.Error()
		}
		return fmtIDs(p) + "/" + fmtIDs(s)
	}
	// states says what ListNodes shows of each node, for a failure.
	states := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := m.client.ListNodes(ctx, &willowv1.ListNodesRequest{})
		if err != nil {
			return "ListNodes: " + err.Error()
		}
		var out []string
		for _, n := range resp.GetNodes() {
			out = append(out, fmt.Sprintf("%s %s (%s) last heartbeat %d ms ago", n.GetNode().GetId(), n.GetState(), n.GetReason(),
				time.Now().UnixMilli()-n.GetLastHeartbeatUnixMs()))
		}
		return strings.Join(out, ", ")
	}
	regWait(t, 5*time.Second, "nodes in Route", func() bool { return show() == want })

	r.Kill()
	for end := time.Now().Add(4 * cfg.MissedAfter); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := show(); got != want {
			t.Fatalf("Redis down: Route = %s, want %s; %s", got, want, states())
		}
	}
	testenv.StartRedisAt(t, dir, port)
	for end := time.Now().Add(4 * cfg.MissedAfter); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := show(); got != want {
			t.Fatalf("Redis back: Route = %s, want %s; %s", got, want, states())
		}
	}
	for _, id := range []string{"upload-a-1", "upload-b-1"} {
		if st := nodeState(t, m.client, id); st.GetState() != master.StateHealthy {
			t.Fatalf("%s after the outage: %s (%s), want healthy", id, st.GetState(), st.GetReason())
		}
	}
}

// BenchmarkRPC measures Route and Heartbeat through gRPC on loopback
// against a real redis-server, 100 registered nodes.
func BenchmarkRPC(b *testing.B) {
	r := testenv.StartRedis(b)
	opt, _ := redis.ParseURL(r.URL)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	n, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: slog.New(slog.DiscardHandler), ShutdownGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	// Nodes that never heartbeat again must not go dead mid-benchmark.
	s, err := master.New(master.Config{OncallToken: "t", MissedAfter: time.Hour, EntryTTL: 2 * time.Hour},
		master.Deps{Node: n, Redis: rdb, Prober: okProber{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	go s.Run(ctx)
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewMasterClient(conn)
	infos := make([]*willowv1.NodeInfo, 100)
	for i := range infos {
		region := "a"
		if i%2 == 1 {
			region = "b"
		}
		infos[i] = &willowv1.NodeInfo{Id: fmt.Sprintf("upload-%d", i), Role: "upload", Region: region, Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if _, err := c.Register(ctx, &willowv1.RegisterRequest{Node: infos[i]}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Heartbeat", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := c.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: infos[i%len(infos)], Load: &willowv1.Load{Requests: 10}}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Route", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Route(ctx, &willowv1.RouteRequest{Role: "upload", Region: "a"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestKilledNodeProcessLeavesRoute(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	cfg := regConfig()
	cfg.MissedAfter = 0                                      // the default, 3 s
	m := startRegMaster(t, rdb, "master-1", cfg, okProber{}) // heartbeats alone must tell
	startRegNode(t, m.addr, "upload-a-2", "upload", "a")
	cmd := exec.Command(os.Args[0]) // runs as a node: see TestMain
	cmd.Env = append(os.Environ(), "WILLOW_HELPER_NODE_MASTER="+m.addr, "WILLOW_HELPER_NODE_ID=upload-a-1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("helper said %q, %v", line, err)
	}
	regWait(t, 5*time.Second, "node process in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
	died := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	regWait(t, 4*time.Second, "killed node out of Route", func() bool { return !inRoute(m.client, "upload", "a", "upload-a-1") })
	took := time.Since(died)
	t.Logf("kill -9: node left Route after %v", took)
	if took > 3*time.Second+50*time.Millisecond {
		t.Fatalf("killed node left Route after %v, want within 3 s", took)
	}
	if !inRoute(m.client, "upload", "a", "upload-a-2") {
		t.Fatal("the live node left Route too")
	}
}

func TestNodesReregisterWhenRedisForgets(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		m := startRegMaster(t, rdb, "master-1", regConfig(), nil)
		startRegNode(t, m.addr, "upload-a-1", "upload", "a")
		regWait(t, 5*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
		if err := testenv.FlushAll(context.Background(), rdb); err != nil {
			t.Fatal(err)
		}
		regWait(t, 5*time.Second, "node registered again", func() bool {
			n, err := rdb.Exists(context.Background(), "{willow:}node:upload-a-1").Result()
			return err == nil && n == 1
		})
		regWait(t, 2*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
	})
}
