package main_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	main "willow/cmd/edgecache"
	"willow/cmd/internal/daemontest"
	"willow/media"
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
	cfg := "node:\n  id: edge-b-7\n  region: b\nedgecache:\n  capacity_bytes: 1048576\n  disk_dir: " + filepath.Join(dir, "disk") +
		"\n  url_keys: [{id: k1, secret: 0123456789abcdef0123}]\n  origin_timeout: 2s\nstore:\n  dir: /nonexistent-overridden\n"
	n, _ := daemontest.StartWithConfig(t, main.Run, cfg, "-store", filepath.Join(dir, "store"), "-http", "127.0.0.1:0")
	if n.Config().ID != "edge-b-7" || n.Config().Region != "b" {
		t.Errorf("node %+v", n.Info())
	}
	addr := n.Info().GetHttpAddr()
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
}

func TestRunRefuses(t *testing.T) {
	env := daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}
	daemontest.Refuses(t, main.Run, env, []daemontest.Refusal{
		{Args: []string{"-region", "a"}, Want: "-store"},
		{Args: []string{"-store", t.TempDir()}, Want: "-region"}, // no default region
		{Args: []string{"-bogus"}, Want: "bogus"},
	})
}

func TestConfigFile(t *testing.T) {
	daemontest.ConfigFile(t, main.Run, "Edgecache.Hash", "Edgecache.Peers", "Edgecache.SkipGRPCShedding")
}
