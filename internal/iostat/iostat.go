// Package iostat counts this process's writes and fsyncs to local disk
// (upload staging, tus temporary files, buffer pools, file journals, the
// fs store) and the bytes through the connections it dials, for the
// resource figures node heartbeats carry (willowv1.Load
// disk_bytes_written, fsyncs, net_bytes_in/out). Counters are
// process-wide and cumulative.
package iostat

import (
	"context"
	"io"
	"net"
	"os"
	"sync/atomic"
)

var written, fsyncs atomic.Int64

// Wrote counts n bytes written to local disk.
func Wrote(n int) {
	if n > 0 {
		written.Add(int64(n))
	}
}

// Sync fsyncs f and counts it.
func Sync(f interface{ Sync() error }) error {
	fsyncs.Add(1)
	return f.Sync()
}

// SyncDir fsyncs the directory dir (after a create or rename in it) and
// counts it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return Sync(d)
}

// Written is the bytes written since the process started.
func Written() int64 { return written.Load() }

// Fsyncs is the fsyncs issued since the process started.
func Fsyncs() int64 { return fsyncs.Load() }

// CountWriter returns w counting every byte written through it as
// written to local disk (a temporary file written with io.Copy).
func CountWriter(w io.Writer) io.Writer { return countWriter{w} }

type countWriter struct{ w io.Writer }

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	Wrote(n)
	return n, err
}

// Outgoing network traffic: the bytes through the connections this
// process dials (gRPC to masters and other nodes, the S3 store, Redis),
// process-wide and cumulative. Servers count their accepted connections
// per node (node.CountListener).
var dialIn, dialOut atomic.Int64

// DialedIn is the bytes read from connections this process dialed.
func DialedIn() int64 { return dialIn.Load() }

// DialedOut is the bytes written to connections this process dialed.
func DialedOut() int64 { return dialOut.Load() }

// Dial dials like d.DialContext and counts the connection's bytes
// (DialedIn, DialedOut). A nil d is a zero net.Dialer.
func Dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &dialedConn{Conn: c}, nil
	}
}

type dialedConn struct{ net.Conn }

func (c *dialedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	dialIn.Add(int64(n))
	return n, err
}

func (c *dialedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	dialOut.Add(int64(n))
	return n, err
}
