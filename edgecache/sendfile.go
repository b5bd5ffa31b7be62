package edgecache

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// A cached hit the disk tier also holds is sent from its file with
// sendfile(2), as nginx sends files: the kernel sends the page cache's
// pages, where a write from the memory tier copies every byte into the
// socket first (at 1 MiB that copy was more than half of a hit's CPU).
// The header goes out in one write and the body by sendfile, with TCP_CORK
// set around both so the header shares a segment with the body (each
// loopback segment costs the sender the receiver's TCP processing too).

// fileBody is a hit's body held both in memory and in a disk-tier file,
// for net/http's response ReadFrom: Read serves what net/http copies
// before switching to its connection's ReadFrom (the first 512 bytes,
// sent with the header) from memory, and WriteTo, which that ReadFrom
// calls with the TCP connection, sends the rest from the file with
// sendfile(2) at an explicit offset: no copy of the bytes through user
// space. Where the writer is not a socket (TLS, a test's recorder), it
// writes from memory.
type fileBody struct {
	data []byte // the object's bytes
	fd   int    // their file
	off  int    // bytes given so far
}

func (b *fileBody) Read(p []byte) (int, error) {
	if b.off >= len(b.data) {
		return 0, io.EOF
	}
	n := copy(p, b.data[b.off:])
	b.off += n
	return n, nil
}

func (b *fileBody) WriteTo(w io.Writer) (int64, error) {
	// The hit path's send, from where net/http is: the sendfile loop
	// through the runtime's Syscall (whether the file is in the page cache
	// is not known here), and the send timeout from the last progress
	// (handoffConn.ReadFrom armed it just before).
	o := &hitWrite{body: b.data, fd: b.fd, sent: b.off,
		dl: sendDeadline{timeout: httpSendTimeout, armed: time.Now(), mark: b.off}}
	if err := o.bind(w); err != nil {
		return 0, err
	}
	n, err := o.sendRest()
	b.off = o.sent
	return n, err
}

// sendBody flushes the header and sends a hit's body from its disk-tier
// file f through w's ReadFrom (net/http's response, which calls
// fileBody.WriteTo with the connection), corked when r's connection is a plain TCP
// socket, and releases f. It returns the body bytes sent.
func sendBody(w http.ResponseWriter, r *http.Request, data []byte, f *entryFile) int64 {
	defer f.release()
	if rc, ok := r.Context().Value(rawConnKey{}).(syscall.RawConn); ok {
		cork(rc, 1)
		defer cork(rc, 0) // pushes what the cork still holds
	}
	b := &fileBody{data: data, fd: f.fd}
	if fl, ok := w.(http.Flusher); ok {
		// The header first (held by the cork), so that ReadFrom goes
		// straight to sendfile instead of copying 512 bytes to sniff.
		fl.Flush()
	}
	if rf, ok := w.(io.ReaderFrom); ok {
		n, _ := rf.ReadFrom(b)
		return n
	}
	n, _ := io.Copy(w, b)
	return n
}

func cork(rc syscall.RawConn, on int) {
	rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, on) })
}

type rawConnKey struct{}

// connContext is the HTTP server's ConnContext: a plain TCP connection's
// socket (under node's counting wrapper) goes into its requests' context,
// for sendBody's TCP_CORK. TLS connections are left alone.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*handoffConn); ok {
		ctx = context.WithValue(ctx, handoffKey{}, hc)
	}
	for {
		if _, ok := c.(*tls.Conn); ok {
			return ctx
		}
		if sc, ok := c.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				return context.WithValue(ctx, rawConnKey{}, rc)
			}
			return ctx
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = u.NetConn()
	}
}
