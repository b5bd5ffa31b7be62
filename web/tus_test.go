package web_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/auth"
	"willow/flex"
)

// TestTusJSExpired (first, so its wait overlaps the others): an upload left unfinished past the staging TTL is gone:
// resuming it gets 410 (404 once the staging GC removed it).
func TestTusJSExpired(t *testing.T) {
	c := live(t)
	path, _ := photo(t, "Bridge_by_Sander_Klootwijk.jpg")
	tok := sign(t, c, "tusjs", "moments")
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": tok,
		"metadata":  map[string]string{"filetype": "image/jpeg", "upload_id": "tusjs-expire-1"},
		"chunkSize": 64 << 10, "abortAfterBytes": 1,
	})
	a, found := es.last("aborted")
	if !found || a.URL == "" {
		t.Fatalf("abort after the first chunk: %+v", es)
	}
	// Wait out the TTL while the other tests run.
	expired := time.Now().Add(stagingTTL + time.Second)
	t.Parallel()
	time.Sleep(time.Until(expired))
	es = tusJS(t, map[string]any{"file": path, "uploadUrl": a.URL, "token": tok, "retryDelays": []int{}})
	e, found := es.last("error")
	if !found || (e.Status != 410 && e.Status != 404) {
		t.Fatalf("resume of an expired upload: want 410 or 404, got %+v", es)
	}
}

// TestTusJSUploadThenEdges uploads a photo with the stock tus-js-client and
// downloads every variant, and the raw bytes, from both regions' edges;
// the same upload ID again gives the same media.
func TestTusJSUploadThenEdges(t *testing.T) {
	c := live(t)
	path, raw := photo(t, "mate_LadyBird.jpg")
	opt := map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": sign(t, c, "tusjs", "moments"),
		"metadata":  map[string]string{"filename": "mate_LadyBird.jpg", "filetype": "image/jpeg", "business": "moments", "upload_id": "tusjs-edges-1"},
		"chunkSize": 256 << 10,
	}
	es := tusJS(t, opt)
	ok, found := es.last("success")
	if !found || ok.MediaID == "" || ok.Location == "" || ok.Region != "a" {
		t.Fatalf("upload: %+v", es)
	}
	if n := es.count("chunk"); n < 2 {
		t.Errorf("%d chunks acknowledged, want several of 256 KiB", n)
	}
	for _, region := range []string{"a", "b"} {
		for _, v := range []string{"thumb", "medium", "large"} {
			if b := waitGET(t, edgeURL(t, c, region, ok.MediaID, v, "tusjs")); len(b) == 0 {
				t.Errorf("%s from %s: empty", v, region)
			}
		}
		if b := waitGET(t, edgeURL(t, c, region, ok.MediaID, "raw", "tusjs")); !bytes.Equal(b, raw) {
			t.Errorf("raw from %s differs from the file (%d bytes, want %d)", region, len(b), len(raw))
		}
	}
	// Idempotency: the same client upload ID names the same media; the
	// creation already says so and nothing is stored twice.
	again := tusJS(t, opt)
	if a, found := again.last("success"); !found || a.MediaID != ok.MediaID {
		t.Fatalf("second upload with the same upload ID: %+v, want media %s", again, ok.MediaID)
	}
}

// TestTusJSResumeAfterCut cuts the connection mid-file: tus-js-client
// retries, finds the offset by HEAD and sends only the rest. The front
// receives every byte exactly once.
func TestTusJSResumeAfterCut(t *testing.T) {
	c := live(t)
	path, raw := photo(t, "Dragonfly_by_Bolly.jpg")
	proxy := newCutProxy(t, strings.TrimPrefix(strings.Split(c.File.Regions["a"].UploadHTTP, "/files/")[0], "http://"))
	reg := c.Node("upload-a-1").Registry()
	heads := counter(t, reg, "willow_upload_http_requests_total", map[string]string{"protocol": "tus", "method": "HEAD"})
	before := bodyBytes(t, c, "a")
	// The creation request and its answer come first on the connection;
	// then the one PATCH with the whole file is cut 600 KB into its body.
	proxy.cut.Store(600 << 10)
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": proxy.url(c.File.Regions["a"].UploadHTTP), "token": sign(t, c, "tusjs", "moments"),
		"metadata": map[string]string{"filename": "dragonfly.jpg", "filetype": "image/jpeg", "upload_id": "tusjs-cut-1"},
	})
	ok, found := es.last("success")
	if !found || ok.MediaID == "" {
		t.Fatalf("upload: %+v", es)
	}
	if es.count("retry") == 0 {
		t.Fatalf("the client never retried: the cut did not happen (%+v)", es)
	}
	if n := counter(t, reg, "willow_upload_http_requests_total", map[string]string{"protocol": "tus", "method": "HEAD"}); n <= heads {
		t.Errorf("no HEAD to find the offset after the cut")
	}
	if got := bodyBytes(t, c, "a") - before; got != float64(len(raw)) {
		t.Errorf("the front received %.0f body bytes for a %d-byte file: bytes were sent twice or lost", got, len(raw))
	}
	b := waitGET(t, edgeURL(t, c, "b", ok.MediaID, "raw", "tusjs"))
	if !bytes.Equal(b, raw) {
		t.Errorf("raw after the resumed upload differs from the file")
	}
}

func TestTusJSChecksumMismatch(t *testing.T) {
	c := live(t)
	path, _ := photo(t, "mate_Wood.jpg")
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": sign(t, c, "tusjs", "moments"),
		"metadata": map[string]string{"filetype": "image/jpeg", "upload_id": "tusjs-sum-1"},
		"headers":  map[string]string{"Upload-Checksum": "sha256 " + base64.StdEncoding.EncodeToString(make([]byte, 32))},
	})
	e, found := es.last("error")
	if !found || e.Status != 460 || !strings.Contains(e.Body, "checksum_mismatch") {
		t.Fatalf("want 460 checksum_mismatch, got %+v", es)
	}
}

func TestTusJSForgedToken(t *testing.T) {
	c := live(t)
	path, _ := photo(t, "mate_Wood.jpg")
	good := sign(t, c, "tusjs", "moments")
	forged := good[:strings.LastIndexByte(good, '.')+1] + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": forged,
		"metadata": map[string]string{"filetype": "image/jpeg", "upload_id": "tusjs-forged-1"},
	})
	e, found := es.last("error")
	// The front's guard refuses the forged token before the upload path sees it.
	if !found || e.Status != 401 || !strings.Contains(e.Body, auth.ReasonBadCredentials) {
		t.Fatalf("want 401 %s, got %+v", auth.ReasonBadCredentials, es)
	}
}

// TestTusJSShed: with shed_ratio.comment=1 the creation is refused 429 with
// Retry-After and a body naming the reason.
func TestTusJSShed(t *testing.T) {
	c := live(t)
	path, _ := photo(t, "mate_Wood.jpg")
	setKnobs(t, c, map[string]string{flex.ShedRatioPrefix + "comment": "1"})
	defer setKnobs(t, c, map[string]string{flex.ShedRatioPrefix + "comment": "0"})
	n := c.Node("upload-a-1")
	deadline := time.Now().Add(10 * time.Second)
	for n.Knobs().ShedRatio["comment"] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("shed_ratio.comment did not reach upload-a-1")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the shedder re-reads knobs at most every KnobRefresh
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": sign(t, c, "tusjs", "comment"),
		"metadata":    map[string]string{"filetype": "image/jpeg", "business": "comment", "upload_id": "tusjs-shed-1"},
		"retryDelays": []int{},
	})
	e, found := es.last("error")
	if !found || e.Status != 429 || e.RetryAfter == "" || !strings.Contains(e.Body, "shed_ratio") {
		t.Fatalf("want 429 with Retry-After naming shed_ratio, got %+v", es)
	}
}

// TestTusJSPixelBomb: a PNG whose header claims a huge canvas, followed by
// 8 MiB, is refused (400 pixel_bomb) from its header, long before its
// body is read.
func TestTusJSPixelBomb(t *testing.T) {
	c := live(t)
	bomb, err := os.ReadFile("../../shared/testdata/bad/bomb.png")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bomb.png")
	if err := os.WriteFile(path, append(bomb, make([]byte, 8<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	before := bodyBytes(t, c, "a")
	es := tusJS(t, map[string]any{
		"file": path, "endpoint": c.File.Regions["a"].UploadHTTP, "token": sign(t, c, "tusjs", "moments"),
		"metadata": map[string]string{"filetype": "image/png", "upload_id": "tusjs-bomb-1"},
	})
	e, found := es.last("error")
	if !found || e.Status != 400 || !strings.Contains(e.Body, "pixel_bomb") {
		t.Fatalf("want 400 pixel_bomb, got %+v", es)
	}
	if got := bodyBytes(t, c, "a") - before; got > 2<<20 {
		t.Errorf("the front read %.0f body bytes of the bomb before refusing it", got)
	}
}
