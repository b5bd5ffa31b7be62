package edgecache_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"willow/edgecache"
	"willow/media"
)

// TestHitSentFromDiskFile: a hit on an object the disk tier holds is sent
// from its file (sendfile), with the same bytes and headers as the memory
// write, on a connection that stays open; Range, conditional and HEAD
// requests, small objects and a writer that is not a socket still get
// the right answer; the bytes are counted.
func TestHitSentFromDiskFile(t *testing.T) {
	st := newStore(t)
	data := payload(100<<10, 3)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
	small := put(t, st, media.LocStore, 2, media.VariantMedium, "image/heic", payload(1000, 4))
	e := startEdge(t, "edge-a-1", edgecache.Config{DiskDir: t.TempDir()}, edgecache.Deps{Store: st})
	u := e.url + path(id, media.VariantMedium)

	fill, body := get(t, u, nil) // the fill (written through to the disk tier)
	if fill.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("fill: status %d, %d bytes", fill.StatusCode, len(body))
	}
	sent0 := edgecache.DiskFilesSent(e.srv)
	// The handler counts a body's bytes after sending it: wait for them.
	servedBytes := func(want int) {
		waitFor(t, fmt.Sprintf("%d bytes served", want), func() bool {
			return counterValue(t, e.node, "willow_edgecache_bytes_served_total", "http") == float64(want)
		})
	}
	servedBytes(len(data))
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	reused := 0
	const hits = 3
	for i := range hits {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) {
				if ci.Reused {
					reused++
				}
			},
		}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, data) {
			t.Fatalf("hit %d: status %d, %d bytes, %v", i, resp.StatusCode, len(b), err)
		}
		for _, h := range []string{"Content-Type", "Content-Length", "ETag", "Last-Modified", "Cache-Control", "Accept-Ranges", "X-Content-Type-Options"} {
			if got, want := resp.Header.Get(h), fill.Header.Get(h); got != want || want == "" {
				t.Errorf("hit %d: %s %q, the fill's %q", i, h, got, want)
			}
		}
	}
	if n := edgecache.DiskFilesSent(e.srv) - sent0; n != hits {
		t.Fatalf("%d hits sent from the disk file, want %d", n, hits)
	}
	if reused != hits-1 {
		t.Errorf("%d of %d hits on a reused connection, want %d (keep-alive after a sendfile)", reused, hits, hits-1)
	}
	servedBytes((1 + hits) * len(data))

	if resp, b := get(t, u, map[string]string{"Range": "bytes=10-19"}); resp.StatusCode != 206 || !bytes.Equal(b, data[10:20]) {
		t.Errorf("range: status %d, %q", resp.StatusCode, b)
	}
	if resp, _ := get(t, u, map[string]string{"If-None-Match": fill.Header.Get("ETag")}); resp.StatusCode != 304 {
		t.Errorf("If-None-Match: status %d, want 304", resp.StatusCode)
	}
	if resp, b := do(t, http.MethodHead, u, nil); resp.StatusCode != 200 || len(b) != 0 || resp.ContentLength != int64(len(data)) {
		t.Errorf("HEAD: status %d, %d body bytes, length %d", resp.StatusCode, len(b), resp.ContentLength)
	}
	sent := edgecache.DiskFilesSent(e.srv)
	rec := httptest.NewRecorder() // not a socket: written from memory
	e.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path(id, media.VariantMedium), nil))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), data) {
		t.Errorf("recorder: status %d, %d bytes", rec.Code, rec.Body.Len())
	}
	for range 2 {
		if resp, b := get(t, e.url+path(small, media.VariantMedium), nil); resp.StatusCode != 200 || len(b) != 1000 {
			t.Fatalf("small object: status %d, %d bytes", resp.StatusCode, len(b))
		}
	}
	if n := edgecache.DiskFilesSent(e.srv) - sent; n != 1 {
		// the recorder's hit opened the file (and wrote from memory); the
		// small object never does
		t.Errorf("%d more files sent, want 1 (the recorder's hit)", n)
	}
}

// openUnder counts this process's descriptors open on files in dir.
func openUnder(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if p, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(p, dir+"/") {
			n++
		}
	}
	return n
}

// size3 is the size of startThreeOnDisk's objects (above its sendfile
// size).
const size3 = 32 << 10

// startThreeOnDisk runs an edge (cfg plus a disk tier that holds two of
// three objects) on a store of three objects of size3 bytes
// (payload(size3, i) for object i).
func startThreeOnDisk(t *testing.T, cfg edgecache.Config) (e *edge, ids []media.ID, dir string, stop func()) {
	t.Helper()
	st := newStore(t)
	for i := range 3 {
		ids = append(ids, put(t, st, media.LocStore, i, media.VariantMedium, "image/heic", payload(size3, byte(i))))
	}
	cfg.DiskDir, cfg.DiskCapacityBytes, cfg.SendfileMinBytes = t.TempDir(), 2*size3+1024, size3/2
	e, stop = runEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	return e, ids, cfg.DiskDir, stop
}

// TestDiskFilesClosed: the disk tier keeps an entry's file open for its
// hits and closes it when the entry is evicted and when the edge stops;
// an evicted object is still served (from memory).
func TestDiskFilesClosed(t *testing.T) {
	e, ids, dir, stop := startThreeOnDisk(t, edgecache.Config{})
	objs := filepath.Join(dir, "objects")
	for round := range 3 {
		for i, id := range ids {
			if resp, b := get(t, e.url+path(id, media.VariantMedium), nil); resp.StatusCode != 200 || !bytes.Equal(b, payload(size3, byte(i))) {
				t.Fatalf("round %d object %d: status %d, %d bytes", round, i, resp.StatusCode, len(b))
			}
		}
	}
	// A hit releases its file just after its last byte went out.
	waitFor(t, "at most 2 files open in the disk tier (its entries)", func() bool { return openUnder(t, objs) <= 2 })
	if edgecache.DiskFilesSent(e.srv) == 0 {
		t.Error("no hit sent from a disk file")
	}
	stop()
	if n := openUnder(t, objs); n != 0 {
		t.Errorf("%d files open in the disk tier after the edge stopped", n)
	}
}

// TestDiskFilesChurn: concurrent hits while the disk tier evicts and
// refills its entries (memory holds none of the objects, the disk tier
// two of three) all get their object's bytes, and the files given up are
// closed.
func TestDiskFilesChurn(t *testing.T) {
	e, ids, dir, stop := startThreeOnDisk(t, edgecache.Config{CapacityBytes: 4096})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 30 {
				i := (w + k) % len(ids)
				resp, err := http.Get(e.url + path(ids[i], media.VariantMedium))
				if err != nil {
					errs <- err.Error()
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, payload(size3, byte(i))) {
					errs <- fmt.Sprintf("object %d: status %d, %d bytes, %v", i, resp.StatusCode, len(b), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if edgecache.DiskFilesSent(e.srv) == 0 {
		t.Error("no hit sent from a disk file")
	}
	waitFor(t, "at most 2 files open in the disk tier (its entries)", func() bool {
		return openUnder(t, filepath.Join(dir, "objects")) <= 2
	})
	stop()
	if n := openUnder(t, filepath.Join(dir, "objects")); n != 0 {
		t.Errorf("%d files open in the disk tier after the edge stopped", n)
	}
}
