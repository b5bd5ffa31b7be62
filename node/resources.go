package node

import (
	"io"
	"net"
	"sync/atomic"
)

// Resource counters carried in every heartbeat (willowv1.Load fields
// 20-29), so a capacity plan can size each module by CPU, memory, network
// and disk on its own. Counters are cumulative since the process started;
// readers take differences between heartbeats.
//
//   - Network: bytes read from and written to the connections this node's
//     servers accept (gRPC, and the HTTP listeners wrapped by
//     CountListener: the edge's and the upload front's), plus the
//     connections the process dials (package iostat: gRPC through Dial,
//     the S3 store, Redis through redisconn), which are process-wide.
//     /proc/self/net/dev is per network namespace, not per process, so it
//     cannot be used.
//   - Disk: bytes written and fsyncs issued where the upload front stages
//     uploads and keeps its pools (package internal/iostat). These are
//     process-wide: nodes sharing one process (willow up, --embedded)
//     report the same figures, as they do for RSS, and say so with
//     Load.shared_process.

// netCounters counts bytes through the connections of a node's listeners.
type netCounters struct{ in, out atomic.Int64 }

// CountListener wraps l so the bytes of every connection it accepts count
// as this node's network traffic in heartbeats. A nil node returns l.
func (n *Node) CountListener(l net.Listener) net.Listener {
	if n == nil {
		return l
	}
	return &countingListener{Listener: l, c: &n.net}
}

type countingListener struct {
	net.Listener
	c *netCounters
}

func (l *countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: l.c}, nil
}

// countBatch: a connection adds its bytes to the node's shared counters
// once it has at least this many uncounted in a direction, and at Close,
// so the shared counters (one cache line every connection's goroutines
// would otherwise write on every Read and Write) are touched about once a
// batch. A heartbeat therefore lags by less than countBatch per open
// connection and direction.
const countBatch = 64 << 10

type countingConn struct {
	net.Conn
	c       *netCounters
	in, out atomic.Int64 // not yet added to c
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.CountRead(n)
	return n, err
}

// CountRead counts n bytes read from the connection's socket by a server
// that reads it without Read (the edge's hit path reads it by raw
// syscalls), as Read counts its own: batched, and all of them at Close.
func (c *countingConn) CountRead(n int) {
	if c.in.Add(int64(n)) >= countBatch {
		c.c.in.Add(c.in.Swap(0))
	}
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote(int64(n))
	return n, err
}

func (c *countingConn) wrote(n int64) {
	if c.out.Add(n) >= countBatch {
		c.c.out.Add(c.out.Swap(0))
	}
}

// ReadFrom keeps the wrapped connection's own ReadFrom (a TCP connection's
// sendfile and splice) for io.Copy into the connection, which net/http
// uses when a handler copies a file into its response.
func (c *countingConn) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.Conn, r)
	c.wrote(n)
	return n, err
}

// NetConn returns the wrapped connection (as tls.Conn.NetConn does), for
// a server that sets socket options on it.
func (c *countingConn) NetConn() net.Conn { return c.Conn }

// ServerBytes returns the bytes read from and written to the connections
// of n's counted listeners so far (CountListener): what heartbeats carry in
// net_bytes_in and net_bytes_out besides the dialed connections, up to
// countBatch per open connection and direction not yet added.
func (n *Node) ServerBytes() (in, out int64) { return n.net.in.Load(), n.net.out.Load() }

func (c *countingConn) Close() error {
	c.c.in.Add(c.in.Swap(0))
	c.c.out.Add(c.out.Swap(0))
	return c.Conn.Close()
}
