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

	"google.golang.org/grpc"

	"willow/auth"
	"willow/cmd/internal/daemontest"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestRunServesCompress(t *testing.T) {
	dir := t.TempDir()
	cfg := daemontest.WriteFile(t, "compress.yaml", "node:\n  region: a\ncompress:\n  workers: 1\n  queue_len: 2\n  task_timeout: 1m\n  temp_dir: "+
		filepath.Join(dir, "tmp")+"\nstore:\n  dir: "+filepath.Join(dir, "store")+"\n")
	n, _ := daemontest.Start(t, run, nil, "-config", cfg, "-id", "compress-t")
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: daemontest.ClusterSecret, ID: "test-1", Role: "upload"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var img bytes.Buffer
	jpeg.Encode(&img, image.NewGray(image.Rect(0, 0, 300, 200)), nil)
	resp, err := willowv1.NewCompressClient(conn).Compress(context.Background(), &willowv1.CompressRequest{
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
}

func TestRunFlagErrors(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	env := daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", store}, "-region"},
		{[]string{"-region", "a"}, "-store"},
		{[]string{"-region", "a", "-store", store, "-s3-endpoint", "h:1"}, "not both"},
		{[]string{"-region", "a", "extra"}, "unexpected"},
		{[]string{"-region", "a", "-config", daemontest.WriteFile(t, "old.yaml", "compress:\n  store: /x\n")}, "store not found"},
	} {
		if err := daemontest.Fail(t, run, env, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	daemontest.RoundTrip(t, &file{}, append(daemontest.NodeUnset, "Compress.Limits", "Compress.Logger", "Compress.Now")...)
	daemontest.ConfigMap(t, "compress", &file{})
}
