package main

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"willow/cmd/internal/daemontest"
	willowv1 "willow/proto/willow/v1"
)

func TestRunServesCompress(t *testing.T) {
	dir := t.TempDir()
	cfg := "node:\n  region: a\ncompress:\n  workers: 1\n  queue_len: 2\n  task_timeout: 1m\n  temp_dir: " +
		filepath.Join(dir, "tmp") + "\nstore:\n  dir: " + filepath.Join(dir, "store") + "\n"
	n, _ := daemontest.StartWithConfig(t, run, cfg, "-id", "compress-t")
	conn := daemontest.Dial(t, n)
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
	daemontest.Refuses(t, run, env, []daemontest.Refusal{
		{Args: []string{"-store", store}, Want: "-region"},
		{Args: []string{"-region", "a"}, Want: "-store"},
		{Args: []string{"-region", "a", "-store", store, "-s3-endpoint", "h:1"}, Want: "not both"},
		{Args: []string{"-region", "a", "extra"}, Want: "unexpected"},
		{Args: []string{"-region", "a", "-config", daemontest.WriteFile(t, "old.yaml", "compress:\n  store: /x\n")}, Want: "store not found"},
	})
}

func TestConfigFile(t *testing.T) {
	daemontest.ConfigFile(t, run, "Compress.Limits", "Compress.Logger", "Compress.Now")
}
