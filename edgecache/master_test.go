package edgecache_test

import (
	"context"
	"testing"
	"time"

	"willow/client"
	"willow/edgecache"
	"willow/internal/testenv"
	"willow/master"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// startMaster runs a real master on a real redis-server until the test
// ends and returns its node (whose Addr the edges dial).
func startMaster(t *testing.T) *node.Node {
	t.Helper()
	mn, err := node.New(node.Config{ID: "master-1", Role: "master", ShutdownGrace: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := master.New(master.Config{OncallToken: "t"}, master.Deps{Node: mn, Redis: testenv.StartRedis(t).Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mdone := make(chan struct{}, 2)
	go func() { mn.Run(ctx); mdone <- struct{}{} }()
	go func() { ms.Run(ctx); mdone <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-mdone; <-mdone })
	return mn
}

// TestRingMembershipFromMaster runs a real master (on a real redis-server)
// and two edge nodes that register with it and learn each other through
// the client SDK router: an object is then read from origin once for the
// OC, whichever node is asked.
func TestRingMembershipFromMaster(t *testing.T) {
	quiet := quiet()
	mn := startMaster(t)
	st := newStore(t)
	data := payload(5000, 11)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
	var edges []*edge
	for _, name := range []string{"edge-a-1", "edge-a-2"} {
		r, err := client.NewRouter(client.RouterConfig{MasterAddr: mn.Addr(), Region: "a"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		edges = append(edges, startEdgeNode(t,
			node.Config{ID: name, Role: "edgecache", Region: "a", MasterAddr: mn.Addr(), HeartbeatInterval: 100 * time.Millisecond, Logger: quiet},
			edgecache.Config{Hash: zeroHash, RefreshInterval: 100 * time.Millisecond},
			edgecache.Deps{Store: st, Router: r}))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range edges {
		for len(e.srv.Members()) != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees members %v", e.node.Config().ID, e.srv.Members())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, e := range []*edge{edges[1], edges[0], edges[1]} {
		resp, body := get(t, e.url+path(id, media.VariantMedium), nil)
		if resp.StatusCode != 200 || string(body) != string(data) {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d origin reads across the OC, want 1", n)
	}
}

// TestBytesOutReachesMaster: the edge fills its heartbeat's bytes_out_per_s
// itself (the bytes it served per second), and the master's auto-flex
// signal edge_bytes_out_per_s reads it.
func TestBytesOutReachesMaster(t *testing.T) {
	mn := startMaster(t)
	ctx := t.Context()
	st := newStore(t)
	data := payload(256<<10, 3)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
	e := startEdgeNode(t,
		node.Config{ID: "edge-a-1", Role: "edgecache", Region: "a", MasterAddr: mn.Addr(), HeartbeatInterval: 200 * time.Millisecond},
		edgecache.Config{Hash: zeroHash},
		edgecache.Deps{Store: st})
	conn, err := node.Dial(mn.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	var load *willowv1.Load
	var signal float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Serve about 1 MiB per heartbeat, then look at what the master has.
		for i := 0; i < 4; i++ {
			if resp, body := get(t, e.url+path(id, media.VariantMedium), nil); resp.StatusCode != 200 || len(body) != len(data) {
				t.Fatalf("GET: %d, %d bytes", resp.StatusCode, len(body))
			}
		}
		time.Sleep(200 * time.Millisecond)
		l, err := mc.ListNodes(ctx, &willowv1.ListNodesRequest{Role: "edgecache"})
		if err != nil {
			t.Fatal(err)
		}
		as, err := mc.GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.GetNodes()) == 1 {
			load = l.GetNodes()[0].GetLoad()
		}
		signal = as.GetSignals()[master.SignalEdgeBytesOut]
		if load.GetBytesOutPerS() > 100<<10 && signal > 100<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("edge heartbeat bytes_out_per_s %.0f, master signal %.0f: want both > 100 KiB/s", load.GetBytesOutPerS(), signal)
		}
	}
	// The figure is the served bytes, not a guess: at most what was sent
	// over the heartbeat window (4 x 256 KiB per ~200 ms plus slack).
	if load.GetBytesOutPerS() > 50<<20 {
		t.Fatalf("bytes_out_per_s %.0f for about 5 MiB/s served", load.GetBytesOutPerS())
	}
}
