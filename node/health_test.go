package node_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// startHealthNode runs a node with one willow service registered and
// returns it, a health client on it and the function that stops it.
func startHealthNode(t *testing.T) (*node.Node, healthpb.HealthClient, func()) {
	t.Helper()
	n, err := node.New(node.Config{ID: "edge-x", Role: "edgecache", Region: "a", ShutdownGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	willowv1.RegisterEdgeCacheServer(n.Server(), willowv1.UnimplementedEdgeCacheServer{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	waitStatus(t, hc, "", healthpb.HealthCheckResponse_SERVING)
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return n, hc, stop
}

func waitStatus(t *testing.T, hc healthpb.HealthClient, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
		cancel()
		if err == nil && resp.GetStatus() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %q: %v %v, want %v", service, resp.GetStatus(), err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHealthByServiceName(t *testing.T) {
	n, hc, _ := startHealthNode(t)
	for _, svc := range []string{"", "willow.v1.EdgeCache", "grpc.health.v1.Health"} {
		waitStatus(t, hc, svc, healthpb.HealthCheckResponse_SERVING)
	}
	_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "willow.v1.Nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v, want NOT_FOUND", err)
	}
	if code, body := healthz(t, n); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}

	// Drain: NOT_SERVING everywhere, /healthz 503, calls still answered.
	n.Drain()
	for _, svc := range []string{"", "willow.v1.EdgeCache"} {
		waitStatus(t, hc, svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if code, body := healthz(t, n); code != http.StatusServiceUnavailable || body != "draining\n" {
		t.Errorf("/healthz while draining = %d %q", code, body)
	}
	if !n.Draining() {
		t.Error("Draining() = false after Drain")
	}
}

func TestHealthNotServingOnShutdown(t *testing.T) {
	_, hc, stop := startHealthNode(t)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: "willow.v1.EdgeCache"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	r, err := w.Recv()
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch during shutdown: %v %v, want NOT_SERVING", r, err)
	}
	wcancel() // the graceful stop waits for open streams
	<-stopped
}

func healthz(t *testing.T, n *node.Node) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
