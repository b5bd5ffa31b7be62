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
)

// TestRingMembershipFromMaster runs a real master (on a real redis-server)
// and two edge nodes that register with it and learn each other through
// the client SDK router: an object is then read from origin once for the
// OC, whichever node is asked.
func TestRingMembershipFromMaster(t *testing.T) {
	redis := testenv.StartRedis(t)
	quiet := quiet()
	mn, err := node.New(node.Config{ID: "master-1", Role: "master", ShutdownGrace: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := master.New(master.Config{OncallToken: "t"}, master.Deps{Node: mn, Redis: redis.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mdone := make(chan struct{}, 2)
	go func() { mn.Run(ctx); mdone <- struct{}{} }()
	go func() { ms.Run(ctx); mdone <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-mdone; <-mdone })

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
