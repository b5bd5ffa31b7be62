package main_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	main "willow/cmd/edgecache"
	"willow/edgecache"
	"willow/media"
	"willow/node"
	fsstore "willow/store/fs"
	"willow/urlsign"
)

func TestRunServesFromConfigAndFlags(t *testing.T) {
	dir := t.TempDir()
	st, err := fsstore.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	id := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u", "1")}
	data := []byte("\xff\xd8\xff\xe0 poster bytes") // a JPEG as far as the header goes
	if err := st.Put(context.Background(), media.VariantKey(id.Key, media.VariantPoster), bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	rec := []byte(`{"business": "moments"}`)
	if err := st.Put(context.Background(), media.RecordKey(id.Key), bytes.NewReader(rec), int64(len(rec)), "application/json"); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "edge.yaml")
	yaml := "node:\n  id: edge-b-7\n  region: b\nedgecache:\n  capacity_bytes: 1048576\n  disk_dir: " + filepath.Join(dir, "disk") + "\n  url_keys: [{id: k1, secret: 0123456789abcdef0123}]\nstore:\n  dir: /nonexistent-overridden\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	m := main.NewMain()
	m.Ready = func(n *node.Node, s *edgecache.Server) {
		if n.Config().ID != "edge-b-7" || n.Config().Region != "b" || n.Info().GetHttpAddr() != s.HTTPAddr() {
			t.Errorf("node %+v", n.Info())
		}
		ready <- s.HTTPAddr()
	}
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, []string{"-config", cfg, "-store", filepath.Join(dir, "store"), "-http", "127.0.0.1:0", "-cluster-secret", "test-secret"})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	resp, err := http.Get("http://" + addr + "/m/" + id.String() + "/poster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned: status %d, want 403 (url_keys are set)", resp.StatusCode)
	}
	keys, err := urlsign.New([]urlsign.Key{{ID: "k1", Secret: "0123456789abcdef0123"}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get("http://" + addr + keys.URL(id.String(), "poster", "u", time.Now().Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != string(data) || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("status %d body %q type %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

func TestRunNeedsAStore(t *testing.T) {
	m := main.NewMain()
	m.Stderr = io.Discard
	if err := m.Run(context.Background(), []string{"-id", "edge-a-1"}); err == nil {
		t.Fatal("no error without a store")
	}
	if err := m.Run(context.Background(), []string{"-bogus"}); err == nil {
		t.Fatal("no error for an unknown flag")
	}
}
