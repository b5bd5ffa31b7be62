package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// urlSession is a client of the IETF resumable-upload draft that sends what
// Apple's URLSession sends (interop version 6): a creation request with
// Upload-Draft-Interop-Version and Upload-Complete, the upload resource
// learned from the 104 interim response, and after an interruption
// resumption by HEAD (Upload-Offset) and a PATCH of the rest as
// application/partial-upload with Upload-Complete: ?1.
type urlSession struct {
	interop string
	token   string
	mu      sync.Mutex
	// location is the upload resource announced by the last 104.
	location string
	interim  int
}

func (u *urlSession) req(method, url string, body []byte) *http.Request {
	r, _ := http.NewRequest(method, url, bytes.NewReader(body))
	r.Header.Set("Upload-Draft-Interop-Version", u.interop)
	r.Header.Set("Authorization", "Bearer "+u.token)
	return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == 104 {
				u.mu.Lock()
				u.interim++
				if l := h.Get("Location"); l != "" {
					u.location = l
				}
				u.mu.Unlock()
			}
			return nil
		},
	}))
}

// create sends the creation request with the whole file; it returns the
// final response, or the transport error of an interrupted exchange.
func (u *urlSession) create(endpoint string, data []byte, complete bool, hdr map[string]string) (*http.Response, error) {
	r := u.req(http.MethodPost, endpoint, data)
	r.Header.Set("Upload-Complete", map[bool]string{true: "?1", false: "?0"}[complete])
	r.Header.Set("Upload-Length", strconv.Itoa(len(data)))
	r.Header.Set("Content-Type", "image/jpeg")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	return http.DefaultClient.Do(r)
}

// resume finds the offset by HEAD and sends the rest, completing it.
func (u *urlSession) resume(t *testing.T, data []byte) *http.Response {
	t.Helper()
	u.mu.Lock()
	loc := u.location
	u.mu.Unlock()
	if loc == "" {
		t.Fatal("no 104 (Upload Resumption Supported) with a Location before the interruption")
	}
	head, err := http.DefaultClient.Do(u.req(http.MethodHead, loc, nil))
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	off, err := strconv.Atoi(head.Header.Get("Upload-Offset"))
	if head.StatusCode/100 != 2 || err != nil || head.Header.Get("Upload-Complete") != "?0" {
		t.Fatalf("HEAD %s: %d %v", loc, head.StatusCode, head.Header)
	}
	if off <= 0 || off >= len(data) {
		t.Fatalf("HEAD offset %d of %d: the interruption should have left part of the file", off, len(data))
	}
	p := u.req(http.MethodPatch, loc, data[off:])
	p.Header.Set("Content-Type", "application/partial-upload")
	p.Header.Set("Upload-Offset", strconv.Itoa(off))
	p.Header.Set("Upload-Complete", "?1")
	resp, err := http.DefaultClient.Do(p)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func finalMedia(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var body struct {
		MediaID string `json:"media_id"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	id := resp.Header.Get("Willow-Media-Id")
	if resp.StatusCode != 200 || resp.Header.Get("Upload-Complete") != "?1" || id == "" || body.MediaID != id {
		t.Fatalf("final response: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	return id
}

// TestIETFURLSessionResume: the creation (Upload-Complete: ?0) is cut mid-
// body; the client resumes from the 104's Location by HEAD and completes
// with a PATCH. Every byte reaches the front once, and the photo is served
// by the edge.
func TestIETFURLSessionResume(t *testing.T) {
	c := live(t)
	_, raw := photo(t, "friends_by_Aitzol_Berasategi.jpg")
	proxy := newCutProxy(t, strings.TrimPrefix(strings.Split(c.File.Regions["a"].UploadHTTP, "/files/")[0], "http://"))
	before := bodyBytes(t, c, "a")
	u := &urlSession{interop: "6", token: sign(t, c, "urlsession", "moments")}
	proxy.hold = 500 * time.Millisecond // the network stalls, then breaks
	proxy.cut.Store(200 << 10)
	if resp, err := u.create(proxy.url(c.File.Regions["a"].UploadHTTP), raw, false, map[string]string{"Willow-Upload-Id": "urlsession-1"}); err == nil {
		resp.Body.Close()
		t.Fatalf("the cut creation got a final response %d", resp.StatusCode)
	}
	id := finalMedia(t, u.resume(t, raw))
	if got := bodyBytes(t, c, "a") - before; got != float64(len(raw)) {
		t.Errorf("the front received %.0f body bytes for a %d-byte file", got, len(raw))
	}
	if b := waitGET(t, edgeURL(t, c, "a", id, "raw", "urlsession")); !bytes.Equal(b, raw) {
		t.Errorf("raw differs from the file")
	}
	waitGET(t, edgeURL(t, c, "b", id, "thumb", "urlsession"))
}

// TestIETFCurrentDraft: the current interop version, the whole file in one
// creation with Upload-Complete: ?1; the same upload ID again names the
// same media.
func TestIETFCurrentDraft(t *testing.T) {
	c := live(t)
	_, raw := photo(t, "mate_Storm.jpg")
	u := &urlSession{interop: "8", token: sign(t, c, "urlsession", "moments")}
	hdr := map[string]string{"Willow-Upload-Id": "ietf8-1", "Content-Disposition": `inline; filename="storm.jpg"`}
	resp, err := u.create(c.File.Regions["b"].UploadHTTP, raw, true, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if u.interim == 0 || u.location == "" {
		t.Errorf("no 104 with the upload resource's Location")
	}
	id := finalMedia(t, resp)
	resp, err = u.create(c.File.Regions["b"].UploadHTTP, raw, true, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if again := finalMedia(t, resp); again != id {
		t.Fatalf("same upload ID: media %s, then %s", id, again)
	}
}
