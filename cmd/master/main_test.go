package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestMainServesFromConfigFile(t *testing.T) {
	r := testenv.StartRedis(t)
	cfgPath := filepath.Join(t.TempDir(), "master.yaml")
	yaml := "node:\n  id: master-7\n  grpc: 127.0.0.1:0\nmaster:\n  redis: " + r.URL + "\n  oncall_token: secret\n  missed_after: 2s\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *node.Node, 1)
	var consoleAddr string
	var stderr bytes.Buffer
	m := &Main{Stderr: &stderr, Getenv: func(string) string { return "" }, Ready: func(n *node.Node, c string) { consoleAddr = c; ready <- n }}
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, []string{"-config", cfgPath, "-admin", "127.0.0.1:0", "-console", "127.0.0.1:0", "-cluster-secret", "test-secret"})
	}()
	var n *node.Node
	select {
	case n = <-ready:
	case err := <-done:
		t.Fatalf("master exited: %v\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("master not ready")
	}
	if n.Config().ID != "master-7" {
		t.Fatalf("node id %q, want master-7 from the config file", n.Config().ID)
	}
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: "test-secret", ID: "test-1", Role: "upload"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := willowv1.NewMasterClient(conn).ListNodes(cctx, &willowv1.ListNodesRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + consoleAddr + "/console")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console: %s", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("master did not stop")
	}
}

func TestMainNeedsRedis(t *testing.T) {
	m := &Main{Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
	if err := m.Run(context.Background(), nil); err == nil {
		t.Fatal("Run without Redis succeeded")
	}
}

func TestMainBadRedisURL(t *testing.T) {
	for _, url := range []string{"redis-cluster://", "redis-cluster://a:1/2", "localhost:6379", "redis://h:1/x"} {
		m := &Main{Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
		err := m.Run(context.Background(), []string{"-redis", url, "-oncall-token", "t", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-console", "127.0.0.1:0"})
		if err == nil || !strings.Contains(err.Error(), "bad redis URL") || strings.Contains(err.Error(), "\n") {
			t.Errorf("-redis %s: %v, want a one-line bad redis URL error", url, err)
		}
	}
}
