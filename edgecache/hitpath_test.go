package edgecache_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"willow/edgecache"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
)

// rawConn is one client connection written and read byte by byte.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, e *edge) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one response to a request of method.
func (r *rawConn) read(method string) (*http.Response, []byte) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
	if err != nil {
		r.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		r.t.Fatal(err)
	}
	return resp, b
}

func rawGet(p string, extra ...string) string {
	return "GET " + p + " HTTP/1.1\r\nHost: edge\r\n" + strings.Join(extra, "") + "\r\n"
}

// TestHitPathAnswersAsNetHTTP: a cached hit answered by the hit path has
// the same status, headers (but Date) and body as net/http's answer (an
// edge with NoHitPath), for GET and HEAD, from memory and from the disk
// tier's file, HEIC and JPEG stored, signed-private and not.
func TestHitPathAnswersAsNetHTTP(t *testing.T) {
	st := newStore(t)
	small := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", payload(3000, 1))
	large := put(t, st, media.LocStore, 2, media.VariantRaw, "image/heic", payload(300<<10, 2))
	other := put(t, st, media.LocStore, 3, media.VariantPoster, "text/html", []byte("<html>not media</html>"))
	fast := startEdge(t, "edge-a-1", edgecache.Config{DiskDir: t.TempDir()}, edgecache.Deps{Store: st})
	plain := startEdge(t, "edge-a-1", edgecache.Config{DiskDir: t.TempDir(), NoHitPath: true}, edgecache.Deps{Store: st})
	for _, p := range []string{path(small, media.VariantMedium), path(large, media.VariantRaw), path(other, media.VariantPoster)} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			var answers [2]*http.Response
			var bodies [2][]byte
			for i, e := range []*edge{fast, plain} {
				get(t, e.url+p, nil) // cached
				sent, served := edgecache.DiskFilesSent(e.srv), edgecache.HitPathServed(e.srv)
				c := dialRaw(t, e)
				for range 2 { // a second request on the same connection
					c.send(method + strings.TrimPrefix(rawGet(p, "User-Agent: raw\r\n"), "GET"))
					answers[i], bodies[i] = c.read(method)
				}
				if p == path(large, media.VariantRaw) && method == http.MethodGet && edgecache.DiskFilesSent(e.srv)-sent != 2 {
					t.Errorf("%s %s on edge %d: not sent from the disk file", method, p, i)
				}
				if n := edgecache.HitPathServed(e.srv) - served; n != int64(2*(1-i)) {
					t.Errorf("%s %s on edge %d: %d answered by the hit path, want %d", method, p, i, n, 2*(1-i))
				}
			}
			f, n := answers[0], answers[1]
			if f.StatusCode != 200 || f.StatusCode != n.StatusCode || !bytes.Equal(bodies[0], bodies[1]) {
				t.Errorf("%s %s: hit path %d (%d bytes), net/http %d (%d bytes)", method, p, f.StatusCode, len(bodies[0]), n.StatusCode, len(bodies[1]))
			}
			if _, err := http.ParseTime(f.Header.Get("Date")); err != nil {
				t.Errorf("%s %s: Date %q: %v", method, p, f.Header.Get("Date"), err)
			}
			f.Header.Del("Date")
			n.Header.Del("Date")
			for k, v := range n.Header {
				if !slices.Equal(f.Header[k], v) {
					t.Errorf("%s %s: %s: hit path %q, net/http %q", method, p, k, f.Header[k], v)
				}
			}
			for k := range f.Header {
				if n.Header[k] == nil {
					t.Errorf("%s %s: hit path sends %s: %q, net/http does not", method, p, k, f.Header[k])
				}
			}
		}
	}
}

// TestHitPathCountsBytesIn: the bytes the hit path reads from a socket
// itself are counted for the heartbeat's net_bytes_in by the node's
// counted connection, in its batches while the connection lives and all
// of them when it ends, exactly once also when it was handed to net/http
// (which reads the bytes the hit path had read from its buffer).
func TestHitPathCountsBytesIn(t *testing.T) {
	st := newStore(t)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", payload(3000, 1))
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	get(t, e.url+path(id, media.VariantMedium), nil) // cached
	in := func() int64 { n, _ := e.node.ServerBytes(); return n }
	base := in()
	pad := "X-Pad: " + strings.Repeat("p", 1000) + "\r\n"
	c := dialRaw(t, e)
	sent := 0
	for range 80 { // 80 KB: more than a batch
		req := rawGet(path(id, media.VariantMedium), pad)
		c.send(req)
		sent += len(req)
		if resp, _ := c.read(http.MethodGet); resp.StatusCode != 200 {
			t.Fatalf("hit: %s", resp.Status)
		}
	}
	if n := in() - base; n < 64<<10 || n > int64(sent) {
		t.Errorf("%d bytes counted with the connection open after %d sent, want a batch of 64 KiB", n, sent)
	}
	// A Range request hands the connection over, with a hit pipelined
	// behind it (read by the hit path, answered by net/http): every byte
	// is counted once when the connection ends.
	req := rawGet(path(id, media.VariantMedium), "Range: bytes=0-9\r\n") + rawGet(path(id, media.VariantMedium))
	c.send(req)
	sent += len(req)
	if resp, _ := c.read(http.MethodGet); resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("range: %s", resp.Status)
	}
	if resp, _ := c.read(http.MethodGet); resp.StatusCode != 200 {
		t.Fatalf("hit after the hand-off: %s", resp.Status)
	}
	if n := in() - base; n > int64(sent) {
		t.Errorf("%d bytes counted after the hand-off, %d sent", n, sent)
	}
	c.c.Close()
	waitFor(t, "the bytes of the handed-off connection counted", func() bool { return in()-base == int64(sent) })
	c2 := dialRaw(t, e)
	req = rawGet(path(id, media.VariantMedium))
	c2.send(req)
	c2.read(http.MethodGet)
	c2.c.Close()
	sent += len(req)
	waitFor(t, "the bytes of a closed connection counted", func() bool { return in()-base == int64(sent) })
	time.Sleep(50 * time.Millisecond)
	if n := in() - base; n != int64(sent) {
		t.Errorf("%d bytes counted in the end, %d sent", n, sent)
	}
}

// TestHitPathHandsOff: on one connection, plain hits are answered by the
// hit path, and the first request that is anything else (a Range, a
// conditional, a miss, a malformed request, HTTP/1.0, Connection: close)
// hands the connection to net/http with the bytes already read
// (pipelined requests included); net/http answers it and what follows.
func TestHitPathHandsOff(t *testing.T) {
	st := newStore(t)
	data := payload(5000, 5)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
	cold := put(t, st, media.LocStore, 2, media.VariantMedium, "image/heic", payload(4000, 6))
	big := payload(200<<10, 7) // sliced: SliceBytes below
	sliced := put(t, st, media.LocStore, 3, media.VariantMedium, "image/heic", big)
	e := startEdge(t, "edge-a-1", edgecache.Config{SliceBytes: 64 << 10}, edgecache.Deps{Store: st})
	p := path(id, media.VariantMedium)
	get(t, e.url+p, nil)
	ok := func(c *rawConn, what string) {
		t.Helper()

		if resp, b := c.read(http.MethodGet); resp.StatusCode != 200 || !bytes.Equal(b, data) {
			t.Fatalf("%s: status %d, %d bytes", what, resp.StatusCode, len(b))
		}
	}
	for _, tc := range []struct {
		name, req string
		check     func(*http.Response, []byte) bool
		hitPath   bool // answered by the hit path, the connection kept
	}{
		{"range", rawGet(p, "Range: bytes=10-19\r\n"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 206 && bytes.Equal(b, data[10:20])
		}, false},
		{"if-none-match", rawGet(p, "If-None-Match: "+etagOfHit(t, e, p)+"\r\n"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 304
		}, false},
		{"miss", rawGet(path(cold, media.VariantMedium)), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 200 && len(b) == 4000
		}, true},
		{"unknown id", rawGet(path(media.ID{Loc: media.LocStore, Region: "a", Node: "n", Key: strings.Repeat("ab", 16)}, media.VariantMedium)),
			func(r *http.Response, b []byte) bool {
				return r.StatusCode == 404 && bytes.Contains(b, []byte("not_found"))
			}, true},
		{"sliced miss", rawGet(path(sliced, media.VariantMedium)), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 200 && bytes.Equal(b, big)
		}, false},
		{"bad id", rawGet("/m/nope/medium"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 400 && bytes.Contains(b, []byte("bad_id"))
		}, false},
		{"escaped path", rawGet("/m/" + id.String() + "%2Fmedium"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 200 && bytes.Equal(b, data) // net/http unescapes it
		}, false},
		{"unknown path", rawGet("/x"), func(r *http.Response, b []byte) bool { return r.StatusCode == 404 }, false},
		{"post", "POST " + p + " HTTP/1.1\r\nHost: edge\r\nContent-Length: 2\r\n\r\nhi", func(r *http.Response, b []byte) bool {
			return r.StatusCode == 405
		}, false},
		{"bad format", rawGet(p + "?format=gif"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 400 && bytes.Contains(b, []byte("bad_format"))
		}, false},
		{"header line without colon", rawGet(p, "Nonsense\r\n"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 400
		}, false},
		{"two hosts", rawGet(p, "Host: other\r\n"), func(r *http.Response, b []byte) bool { return r.StatusCode == 400 }, false},
		{"expect", rawGet(p, "Expect: 100-continue\r\n"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 200 && bytes.Equal(b, data)
		}, false},
		{"long head", rawGet(p, "X-Pad: "+strings.Repeat("a", 8000)+"\r\n"), func(r *http.Response, b []byte) bool {
			return r.StatusCode == 200 && bytes.Equal(b, data)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := edgecache.HitPathServed(e.srv)
			defer func() {
				// The two hits before the odd request; net/http the rest,
				// or the hit path all five.
				want := int64(2)
				if tc.hitPath {
					want = 4 // the error is not counted as served
					if tc.name == "miss" {
						want = 5
					}
				}
				if n := edgecache.HitPathServed(e.srv) - served; n != want {
					t.Errorf("%d requests answered by the hit path, want %d", n, want)
				}
			}()
			c := dialRaw(t, e)
			c.send(rawGet(p))
			ok(c, "first hit")
			// The odd request pipelined between two hits.
			c.send(rawGet(p) + tc.req + rawGet(p))
			ok(c, "second hit")
			if resp, b := c.read(http.MethodGet); !tc.check(resp, b) {
				t.Fatalf("status %d, %q", resp.StatusCode, b[:min(len(b), 200)])
			} else if resp.Close {
				return // net/http closes after a malformed request
			}
			ok(c, "hit after it (net/http)")
			c.send(rawGet(p))
			ok(c, "later hit")
		})
	}
	t.Run("http/1.0 and connection close", func(t *testing.T) {
		for _, req := range []string{"GET " + p + " HTTP/1.0\r\n\r\n", rawGet(p, "Connection: close\r\n")} {
			c := dialRaw(t, e)
			c.send(req)
			ok(c, req)
			if n, err := c.br.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("%q: connection still open (%d, %v)", req, n, err)
			}
		}
	})
	t.Run("head in pieces", func(t *testing.T) {
		c := dialRaw(t, e)
		req := rawGet(p, "Willow-User: u1\r\n")
		for i := 0; i < len(req); i += 7 {
			c.send(req[i:min(i+7, len(req))])
			time.Sleep(time.Millisecond)
		}
		ok(c, "hit sent in pieces")
	})
}

// etagOfHit returns the ETag the edge serves p with.
func etagOfHit(t *testing.T, e *edge, p string) string {
	t.Helper()
	resp, _ := get(t, e.url+p, nil)
	return resp.Header.Get("ETag")
}

// TestHitPathShed: a cached object under shed_ratio 1 is refused by the
// hit path as serveHTTP refuses it (429, Retry-After, the reason in the
// JSON body), and the connection stays open.
func TestHitPathShed(t *testing.T) {
	st := newStore(t)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", payload(100, 8))
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	p := path(id, media.VariantThumb)
	get(t, e.url+p, nil)
	e.node.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"shed_ratio.moments": "1"}})
	c := dialRaw(t, e)
	for i := range 2 {
		c.send(rawGet(p))
		resp, b := c.read(http.MethodGet)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !bytes.Contains(b, []byte(shedding.ReasonShedRatio)) ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, b)
		}
	}
	c.send("HEAD " + p + " HTTP/1.1\r\nHost: edge\r\n\r\n")
	if resp, b := c.read(http.MethodHead); resp.StatusCode != 429 || len(b) != 0 {
		t.Fatalf("HEAD: %d, %d body bytes", resp.StatusCode, len(b))
	}
	c.send(rawGet(p + "?b=ads"))
	if resp, _ := c.read(http.MethodGet); resp.StatusCode != 200 {
		t.Fatalf("other business: %d", resp.StatusCode)
	}
	if n := counterValue(t, e.node, "willow_edgecache_shed_total", "moments"); n != 3 {
		t.Errorf("shed_total{moments} %v, want 3 (each refusal counted once)", n)
	}
}

// TestHitPathStops: an edge stops with idle keep-alive connections of the
// hit path open, and closes them.
func TestHitPathStops(t *testing.T) {
	st := newStore(t)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", payload(100, 8))
	e, stop := runEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	p := path(id, media.VariantThumb)
	c := dialRaw(t, e)
	for range 2 { // a miss (net/http) on one connection, a hit on the other
		c.send(rawGet(p))
		c.read(http.MethodGet)
		c = dialRaw(t, e)
	}
	c.send(rawGet(p))
	c.read(http.MethodGet)
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("edge did not stop with idle connections open")
	}
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("idle hit-path connection after stop: %v, want EOF", err)
	}
}

// BenchmarkHitPath measures a cached 100 KiB hit through the hit path on
// one keep-alive loopback connection (a raw client that allocates
// nothing, so allocs/op are the edge's).
//
//	go test -run '^$' -bench HitPath -benchmem ./edgecache
func BenchmarkHitPath(b *testing.B) {
	for _, disk := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "sendfile"}[disk], func(b *testing.B) {
			st := newStore(b)
			data := payload(100<<10, 1)
			id := put(b, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
			cfg := edgecache.Config{}
			if disk {
				cfg.DiskDir = b.TempDir()
			}
			e := startEdge(b, "edge-a-1", cfg, edgecache.Deps{Store: st})
			c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte(rawGet(path(id, media.VariantMedium), "User-Agent: bench\r\n"))
			buf := make([]byte, 256<<10)
			hit := func() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				// The header then exactly the body: read until both are in.
				n, end := 0, -1
				for end < 0 || n < end+len(data) {
					m, err := c.Read(buf[n:])
					if err != nil {
						b.Fatal(err)
					}
					n += m
					if end < 0 {
						if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 {
							end = i + 4
						}
					}
				}
			}
			hit() // the fill
			hit()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				hit()
			}
		})
	}
}

// TestHeaderMoreRule: a large sendfile answer's header is held for the
// body (MSG_MORE) only once the connection is past its first answers, and
// never for a small one.
func TestHeaderMoreRule(t *testing.T) {
	for _, tc := range []struct {
		n, answer int
		want      bool
	}{
		{1 << 20, 1, false}, {1 << 20, 8, false}, {1 << 20, 9, true}, {1 << 20, 1000, true},
		{512 << 10, 9, true}, {512<<10 - 1, 9, false}, {100 << 10, 1000, false}, {0, 9, false},
	} {
		if got := edgecache.HeaderMore(tc.n, tc.answer); got != tc.want {
			t.Errorf("HeaderMore(%d bytes, answer %d) = %v, want %v", tc.n, tc.answer, got, tc.want)
		}
	}
}
