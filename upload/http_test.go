package upload_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"willow/internal/iostat"
	"willow/shedding"
	"willow/upload"
)

// httpFront starts the HTTP protocols on a test front.
func httpFront(t *testing.T, f *front, cfg upload.HTTPConfig) *upload.HTTP {
	t.Helper()
	h, err := upload.NewHTTP(f.srv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func do(t *testing.T, method, url string, hdr map[string]string, body []byte) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func bodyOf(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

func md(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+" "+base64.StdEncoding.EncodeToString([]byte(kv[i+1])))
	}
	return strings.Join(parts, ",")
}

// TestTusWire drives the tus wire protocol by hand: the stock-client tests
// (cluster package) cover tus-js-client; these pin the headers.
func TestTusWire(t *testing.T) {
	f := newFront(t, frontOpts{})
	h := httpFront(t, f, upload.HTTPConfig{CORSOrigins: []string{"http://page.example"}})
	data := photo(t)
	auth := "Bearer " + tok(t, "u1", "moments")

	resp := do(t, "OPTIONS", h.URL(), nil, nil)
	if resp.StatusCode != 204 || resp.Header.Get("Tus-Version") != "1.0.0" ||
		!strings.Contains(resp.Header.Get("Tus-Extension"), "creation-with-upload") ||
		resp.Header.Get("Tus-Checksum-Algorithm") != "sha1,sha256" || resp.Header.Get("Tus-Max-Size") == "" {
		t.Fatalf("OPTIONS: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(t, "OPTIONS", h.URL(), map[string]string{"Origin": "http://page.example", "Access-Control-Request-Method": "POST"}, nil)
	if resp.Header.Get("Access-Control-Allow-Origin") != "http://page.example" || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Upload-Offset") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(t, "OPTIONS", h.URL(), map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, nil)
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from a foreign origin: %d %v", resp.StatusCode, resp.Header)
	}

	create := map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Upload-Length": strconv.Itoa(len(data)),
		"Upload-Metadata": md("filename", "p.jpg", "filetype", "image/jpeg", "business", "moments", "upload_id", "tw-1"), "Origin": "http://page.example"}
	resp = do(t, "POST", h.URL(), create, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 201 || !strings.HasPrefix(loc, h.URL()) || resp.Header.Get("Upload-Expires") == "" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Willow-Media-Id") {
		t.Fatalf("create: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	patch := func(off int, b []byte, extra ...string) *http.Response {
		hd := map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Content-Type": "application/offset+octet-stream", "Upload-Offset": strconv.Itoa(off)}
		for i := 0; i+1 < len(extra); i += 2 {
			hd[extra[i]] = extra[i+1]
		}
		return do(t, "PATCH", loc, hd, b)
	}
	half := len(data) / 2
	sum := sha1.Sum(data[:half])
	if resp = patch(0, data[:half], "Upload-Checksum", "sha1 "+base64.StdEncoding.EncodeToString(make([]byte, 20))); resp.StatusCode != 460 {
		t.Fatalf("bad checksum: %d %s", resp.StatusCode, bodyOf(resp))
	}
	w0 := iostat.Written()
	if resp = patch(0, data[:half], "Upload-Checksum", "sha1 "+base64.StdEncoding.EncodeToString(sum[:])); resp.StatusCode != 204 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) {
		t.Fatalf("patch 1: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	// A checksummed body is written twice: to its .patch temporary file,
	// then to staging; heartbeats count both.
	if w := iostat.Written() - w0; w < int64(2*half) {
		t.Errorf("disk bytes written for a checksummed PATCH of %d bytes: %d, want >= %d", half, w, 2*half)
	}
	if resp = patch(0, data[:half]); resp.StatusCode != 409 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) {
		t.Fatalf("patch at a stale offset: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(t, "HEAD", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) || resp.Header.Get("Upload-Length") != strconv.Itoa(len(data)) ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("head: %d %v", resp.StatusCode, resp.Header)
	}
	if resp = do(t, "HEAD", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": "Bearer " + tok(t, "u2", "moments")}, nil); resp.StatusCode != 404 {
		t.Fatalf("another user's HEAD: %d", resp.StatusCode)
	}
	if resp = do(t, "HEAD", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": "Bearer v1.forged.sig"}, nil); resp.StatusCode != 401 {
		t.Fatalf("forged token: %d", resp.StatusCode)
	}
	resp = patch(half, data[half:])
	id := resp.Header.Get(upload.HeaderMediaID)
	if resp.StatusCode != 204 || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) || id == "" || resp.Header.Get(upload.HeaderMediaLocation) != "store" {
		t.Fatalf("final patch: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	if got := storeBytes(t, f.store, "raw/"+strings.Split(id, ".")[3]); !bytes.Equal(got, data) {
		t.Fatalf("stored raw differs (%d bytes)", len(got))
	}
	// HEAD of the completed upload, and a creation of the same upload ID,
	// name the same media.
	resp = do(t, "HEAD", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil)
	if resp.Header.Get(upload.HeaderMediaID) != id || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		t.Fatalf("head after commit: %v", resp.Header)
	}
	resp = do(t, "POST", h.URL(), create, nil)
	if resp.StatusCode != 201 || resp.Header.Get(upload.HeaderMediaID) != id || resp.Header.Get("Location") != loc {
		t.Fatalf("re-create: %d %v", resp.StatusCode, resp.Header)
	}
	if resp = do(t, "POST", h.URL(), map[string]string{"Upload-Length": "5"}, nil); resp.StatusCode != 412 {
		t.Fatalf("no Tus-Resumable: %d", resp.StatusCode)
	}

	// creation-with-upload, then termination.
	c2 := map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Upload-Length": strconv.Itoa(len(data)),
		"Upload-Metadata": md("upload_id", "tw-2"), "Content-Type": "application/offset+octet-stream"}
	resp = do(t, "POST", h.URL(), c2, data[:100])
	if resp.StatusCode != 201 || resp.Header.Get("Upload-Offset") != "100" {
		t.Fatalf("creation-with-upload: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	loc2 := resp.Header.Get("Location")
	if resp = do(t, "DELETE", loc2, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d %s", resp.StatusCode, bodyOf(resp))
	}
	if resp = do(t, "HEAD", loc2, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil); resp.StatusCode != 404 {
		t.Fatalf("head after delete: %d", resp.StatusCode)
	}
	if resp = do(t, "DELETE", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil); resp.StatusCode != 409 {
		t.Fatalf("delete of a committed upload: %d", resp.StatusCode)
	}
}

func TestTusShedAndExpiry(t *testing.T) {
	f := newFront(t, frontOpts{cfg: upload.Config{StagingTTL: 300 * time.Millisecond}})
	h := httpFront(t, f, upload.HTTPConfig{})
	auth := "Bearer " + tok(t, "u1", "moments")
	create := map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Upload-Length": "1000", "Upload-Metadata": md("upload_id", "sh-1")}
	f.shed(shedding.ReasonShedRatio)
	resp := do(t, "POST", h.URL(), create, nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(bodyOf(resp), shedding.ReasonShedRatio) {
		t.Fatalf("shed: %d %v", resp.StatusCode, resp.Header)
	}
	f.shed(shedding.ReasonOverload)
	if resp = do(t, "POST", h.URL(), create, nil); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("overload without pool 1: %d %v", resp.StatusCode, resp.Header)
	}
	f.shed("")
	resp = do(t, "POST", h.URL(), create, nil)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, bodyOf(resp))
	}
	time.Sleep(400 * time.Millisecond)
	resp = do(t, "HEAD", resp.Header.Get("Location"), map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil)
	if resp.StatusCode != 410 {
		t.Fatalf("expired: %d", resp.StatusCode)
	}
}

// TestIETFWire is the URLSession exchange: creation with the interop
// version and Upload-Complete: ?0 announced by a 104, then resumption by
// HEAD and an append that completes the upload.
func TestIETFWire(t *testing.T) {
	f := newFront(t, frontOpts{})
	h := httpFront(t, f, upload.HTTPConfig{})
	data := photo(t)
	auth := "Bearer " + tok(t, "u1", "moments")
	for _, v := range []string{"6", "8"} {
		t.Run("interop"+v, func(t *testing.T) {
			half := len(data) / 2
			req, _ := http.NewRequest("POST", h.URL(), bytes.NewReader(data[:half]))
			req.Header.Set("Upload-Draft-Interop-Version", v)
			req.Header.Set("Upload-Complete", "?0")
			req.Header.Set("Upload-Length", strconv.Itoa(len(data)))
			req.Header.Set("Content-Type", "image/jpeg")
			req.Header.Set("Authorization", auth)
			req.Header.Set(upload.HeaderUploadID, "ietf-"+v)
			var interim []textproto.MIMEHeader
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					if code == 104 {
						interim = append(interim, h)
					}
					return nil
				},
			}))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(interim) == 0 || interim[0].Get("Location") == "" || interim[0].Get("Upload-Draft-Interop-Version") != v {
				t.Fatalf("no 104 with Location: %v", interim)
			}
			loc := interim[0].Get("Location")
			if resp.StatusCode != 201 || resp.Header.Get("Location") != loc || resp.Header.Get("Upload-Complete") != "?0" {
				t.Fatalf("create: %d %v", resp.StatusCode, resp.Header)
			}
			resp = do(t, "HEAD", loc, map[string]string{"Upload-Draft-Interop-Version": v, "Authorization": auth}, nil)
			if resp.StatusCode != 204 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) || resp.Header.Get("Upload-Complete") != "?0" ||
				!strings.Contains(resp.Header.Get("Upload-Limit"), "max-size=") {
				t.Fatalf("head: %d %v", resp.StatusCode, resp.Header)
			}
			app := map[string]string{"Upload-Draft-Interop-Version": v, "Authorization": auth, "Content-Type": "application/partial-upload",
				"Upload-Offset": "0", "Upload-Complete": "?1"}
			if resp = do(t, "PATCH", loc, app, data[half:]); resp.StatusCode != 409 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) {
				t.Fatalf("append at a wrong offset: %d %v", resp.StatusCode, resp.Header)
			}
			app["Upload-Offset"] = strconv.Itoa(half)
			resp = do(t, "PATCH", loc, app, data[half:])
			if resp.StatusCode != 200 || resp.Header.Get("Upload-Complete") != "?1" || resp.Header.Get(upload.HeaderMediaID) == "" ||
				!strings.Contains(bodyOf(resp), `"media_id"`) {
				t.Fatalf("final append: %d %v", resp.StatusCode, resp.Header)
			}
			id := resp.Header.Get(upload.HeaderMediaID)
			resp = do(t, "HEAD", loc, map[string]string{"Upload-Draft-Interop-Version": v, "Authorization": auth}, nil)
			if resp.Header.Get("Upload-Complete") != "?1" || resp.Header.Get(upload.HeaderMediaID) != id {
				t.Fatalf("head after completion: %v", resp.Header)
			}
		})
	}
}
