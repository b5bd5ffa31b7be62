package edgecache_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"willow/edgecache"
	"willow/media"
	"willow/node"
)

// runEdge runs an edge until stop is called (a restartable startEdge).
func runEdge(t *testing.T, id string, cfg edgecache.Config, deps edgecache.Deps) (e *edge, stop func()) {
	t.Helper()
	n, err := node.New(node.Config{ID: id, Role: "edgecache", Region: "a", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	deps.Node = n
	s, err := edgecache.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nodeDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { srvDone <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-srvDone; err != nil {
			t.Errorf("edge Run: %v", err)
		}
		<-nodeDone
	}
	t.Cleanup(stop)
	return &edge{node: n, srv: s, url: "http://" + s.HTTPAddr()}, stop
}

// TestWarmDiskAfterRestart restarts an edge on the same disk directory: it
// serves what it had on disk without an origin read, and an entry whose
// file was torn (truncated or overwritten) is dropped and read from origin
// again, never served: neither written from memory (3000 bytes) nor sent
// from its file (20000 bytes, above the sendfile size).
func TestWarmDiskAfterRestart(t *testing.T) {
	for _, size := range []int{3000, 20000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testWarmDiskAfterRestart(t, size) })
	}
}

func testWarmDiskAfterRestart(t *testing.T, size int) {
	st := newStore(t)
	dir := t.TempDir()
	// Memory is tiny, so every hit after the restart comes from disk.
	cfg := edgecache.Config{CapacityBytes: 4096, DiskDir: dir, SendfileMinBytes: 16 << 10}
	const n = 6
	var ids []media.ID
	for i := range n {
		ids = append(ids, put(t, st, media.LocStore, i, media.VariantLarge, "image/heic", payload(size+i, byte(i))))
	}
	e, stop := runEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	etags := map[int]string{}
	for i, id := range ids {
		resp, body := get(t, e.url+path(id, media.VariantLarge), nil)
		if resp.StatusCode != 200 || string(body) != string(payload(size+i, byte(i))) {
			t.Fatalf("object %d: status %d", i, resp.StatusCode)
		}
		etags[i] = resp.Header.Get("ETag")
	}
	if got := st.gets.Load(); got != n {
		t.Fatalf("%d origin reads on the cold edge, want %d", got, n)
	}
	stop()

	// Tear two entries: one truncated, one with flipped bytes (same size),
	// and leave a stray temporary file behind.
	objs := filepath.Join(dir, "objects")
	var datas []string
	ents, _ := os.ReadDir(objs)
	for _, de := range ents {
		if !strings.Contains(de.Name(), ".") {
			datas = append(datas, filepath.Join(objs, de.Name()))
		}
	}
	if len(datas) != n {
		t.Fatalf("%d data files on disk, want %d", len(datas), n)
	}
	if err := os.Truncate(datas[0], 100); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(datas[1])
	for i := range b {
		b[i] ^= 0xff
	}
	os.WriteFile(datas[1], b, 0o644)
	os.WriteFile(filepath.Join(objs, "deadbeef.tmp"), []byte("half"), 0o644)

	st.gets.Store(0)
	e, stop = runEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	defer stop()
	for i, id := range ids {
		resp, body := get(t, e.url+path(id, media.VariantLarge), nil)
		if resp.StatusCode != 200 || string(body) != string(payload(size+i, byte(i))) {
			t.Fatalf("after restart object %d: status %d, %d bytes", i, resp.StatusCode, len(body))
		}
		if resp.Header.Get("ETag") != etags[i] {
			t.Fatalf("after restart object %d: ETag %s, want %s", i, resp.Header.Get("ETag"), etags[i])
		}
	}
	if got := st.gets.Load(); got != 2 {
		t.Fatalf("%d origin reads after the restart, want 2 (only the two torn entries)", got)
	}
	if n, want := edgecache.DiskFilesSent(e.srv), int64(n); size >= 16<<10 && n != want {
		t.Fatalf("%d hits sent from disk files after the restart, want %d (each checked first)", n, want)
	}
	if _, err := os.Stat(filepath.Join(objs, "deadbeef.tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file kept: %v", err)
	}
}

// TestWarmDiskSlicedAfterRestart: a sliced object (head and slices on
// disk) is served whole after a restart without an origin read.
func TestWarmDiskSlicedAfterRestart(t *testing.T) {
	st := newStore(t)
	dir := t.TempDir()
	cfg := edgecache.Config{CapacityBytes: 4096, DiskDir: dir, SliceBytes: testSlice}
	data := payload(3*testSlice+99, 7)
	id := put(t, st, media.LocStore, 1, media.VariantVideo, "video/mp4", data)
	e, stop := runEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	resp, body := get(t, e.url+path(id, media.VariantVideo), nil)
	if resp.StatusCode != 200 || string(body) != string(data) {
		t.Fatalf("cold: status %d", resp.StatusCode)
	}
	etag := resp.Header.Get("ETag")
	stop()
	st.gets.Store(0)
	e, stop = runEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	defer stop()
	resp, body = get(t, e.url+path(id, media.VariantVideo), nil)
	if resp.StatusCode != 200 || string(body) != string(data) || resp.Header.Get("ETag") != etag {
		t.Fatalf("after restart: status %d, %d bytes, ETag %s (was %s)", resp.StatusCode, len(body), resp.Header.Get("ETag"), etag)
	}
	if n := st.gets.Load(); n != 0 {
		t.Fatalf("%d origin reads after the restart, want 0", n)
	}
}
