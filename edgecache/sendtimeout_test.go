package edgecache_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"willow/edgecache"
	"willow/media"
)

// TestSendTimeout: a client that asks for a large object and never reads
// (its receive buffer as small as the kernel allows: the edge's writes
// fill the socket and wait) is cut off once the send timeout passes
// without progress, on the hit path, on net/http after a hand-off (a
// Range request) and on an edge without the hit path; a client that
// reads slowly but steadily, for longer than the timeout in all, gets
// the whole body.
func TestSendTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	edgecache.SetSendTimeout(t, timeout)
	st := newStore(t)
	data := payload(12<<20, 3) // more than the edge's socket buffer (tcp_wmem at most 4 MiB)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", data)
	p := path(id, media.VariantMedium)
	cfg := edgecache.Config{SliceBytes: 32 << 20} // one piece, held whole in memory
	edges := map[string]*edge{
		"hit path": startEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st}),
	}
	noHit := cfg
	noHit.NoHitPath = true
	edges["no hit path"] = startEdge(t, "edge-a-2", noHit, edgecache.Deps{Store: st})
	for _, e := range edges {
		get(t, e.url+p, nil) // cached
	}
	for _, tc := range []struct {
		name, edge, req string
	}{
		{"hit", "hit path", rawGet(p)},
		{"handed off", "hit path", rawGet(p, "Range: bytes=0-\r\n")},
		{"net/http", "no hit path", rawGet(p)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialSmall(t, edges[tc.edge], 4096)
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			time.Sleep(4 * timeout) // never reading
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if errors.Is(err, os.ErrDeadlineExceeded) || n >= int64(len(data)) {
				t.Fatalf("read %d bytes (%v) after %v without reading, want the connection closed before the %d bytes of the body",
					n, err, 4*timeout, len(data))
			}
		})
	}
	t.Run("slow reader", func(t *testing.T) {
		c := dialSmall(t, edges["hit path"], 64<<10)
		if _, err := io.WriteString(c, rawGet(p)); err != nil {
			t.Fatal(err)
		}
		// At most 128 KiB (twice the buffer asked for) every 20 ms: 12 MiB
		// in 2 s or more, four timeouts, never more than 20 ms between
		// reads.
		buf := make([]byte, 800<<10)
		want := int64(len(data))
		var got int64
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		for got < want {
			n, err := c.Read(buf)
			got += int64(n)
			if err != nil {
				t.Fatalf("after %d bytes: %v", got, err)
			}
			if strings.Contains(string(buf[:min(n, 16)]), "HTTP/1.1") {
				want += int64(strings.Index(string(buf[:n]), "\r\n\r\n") + 4) // the header
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// dialSmall dials e with a receive buffer of rcvbuf bytes (the kernel
// doubles it, and allows no less than its minimum), set before the
// connection opens so that the window stays small.
func dialSmall(t *testing.T, e *edge, rcvbuf int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
