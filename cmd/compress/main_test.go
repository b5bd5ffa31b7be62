package main

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
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

func TestRunServesCompress(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "compress.yaml")
	yaml := "node:\n  region: a\ncompress:\n  workers: 1\n  queue_len: 2\n  store: " + filepath.Join(dir, "store") + "\n  temp_dir: " + filepath.Join(dir, "tmp") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *node.Node, 1)
	var stderr bytes.Buffer
	m := &Main{Stderr: &stderr, Ready: func(n *node.Node) { ready <- n }}
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, []string{"-config", cfg, "-id", "compress-t", "-cluster-secret", "test-secret"})
	}()
	var n *node.Node
	select {
	case n = <-ready:
	case err := <-done:
		t.Fatalf("exited: %v\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: "test-secret", ID: "test-1", Role: "upload"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var img bytes.Buffer
	jpeg.Encode(&img, image.NewGray(image.Rect(0, 0, 300, 200)), nil)
	resp, err := willowv1.NewCompressClient(conn).Compress(ctx, &willowv1.CompressRequest{
		MediaId: "s.a.upload-a-1.0123456789abcdef0123456789abcdef", Kind: willowv1.Kind_KIND_IMAGE, Data: img.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Variants) != 3 {
		t.Fatalf("variants: %v", resp.Variants)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-store", "x"}, "-region"},
		{[]string{"-region", "a"}, "-store"},
		{[]string{"-region", "a", "-store", "x", "-s3-endpoint", "h:1"}, "not both"},
		{[]string{"-region", "a", "extra"}, "unexpected"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		err := (&Main{Stderr: &stderr}).Run(context.Background(), tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
}
