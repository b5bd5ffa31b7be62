package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestRunServesUpload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "upload.yaml")
	yaml := "node:\n  region: a\nupload:\n  staging: " + filepath.Join(dir, "staging") + "\n  pool_dir: " + filepath.Join(dir, "pools") +
		"\nstore:\n  dir: " + filepath.Join(dir, "store") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ops := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(ops, []byte(auth.OperatorLine("ops", "op-token", auth.RoleRead)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *node.Node, 1)
	var stderr bytes.Buffer
	m := &Main{Stderr: &stderr, Getenv: func(string) string { return "" }, Ready: func(n *node.Node) { ready <- n }}
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, []string{"-config", cfg, "-secret", "s", "-cluster-secret", "test-secret", "-operators", ops})
	}()
	var n *node.Node
	select {
	case n = <-ready:
	case err := <-done:
		t.Fatalf("exited: %v\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if n.Config().ID != "upload-a-1" {
		t.Fatalf("id %q", n.Config().ID)
	}
	// Buffer status is an operator's call: a named identity with role read.
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.Bearer("op-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := willowv1.NewUploadClient(conn).BufferStatus(ctx, &willowv1.BufferStatusRequest{})
	if err != nil || len(st.GetPools()) != 2 || st.GetPools()[0].GetMode() != "auto" {
		t.Fatalf("BufferStatus = %v, %v", st, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunNeedsSecretAndStaging(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-region", "a", "-staging", "x", "-store", "y"}, "secret"},
		{[]string{"-region", "a", "-secret", "s", "-store", "y"}, "staging"},
		{[]string{"-secret", "s", "-staging", "x", "-store", "y"}, "region"},
		{[]string{"-region", "a", "-secret", "s", "-staging", t.TempDir()}, "store"},
	} {
		m := &Main{Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
		err := m.Run(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%v) = %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}
