package node

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"willow/internal/iostat"
)

// The heartbeat load carries the process's RSS, the bytes through the
// node's counted listeners and the connections the process dials, and the
// disk counters.
func TestLoadCarriesResourceCounters(t *testing.T) {
	n, err := New(Config{ID: "res-1", Role: "upload", Region: "a", SharedProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.lis.Close()
	defer n.adminL.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := n.CountListener(l)
	defer cl.Close()
	go func() {
		c, err := cl.Accept()
		if err != nil {
			return
		}
		b := make([]byte, 1000)
		io.ReadFull(c, b)
		c.Write(make([]byte, 300))
		c.Close()
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write(make([]byte, 1000))
	io.ReadAll(c)
	c.Close()

	w0, s0 := iostat.Written(), iostat.Fsyncs()
	f, _ := os.Create(filepath.Join(t.TempDir(), "f"))
	k, _ := f.Write(make([]byte, 4096))
	iostat.Wrote(k)
	iostat.Sync(f)
	f.Close()

	// A connection the process dials counts too (process-wide).
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	go func() {
		c, err := dl.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, 700))
		c.Write(make([]byte, 50))
		c.Close()
	}()
	in0, out0 := iostat.DialedIn(), iostat.DialedOut()
	dc, err := countedDial(context.Background(), "tcp", dl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dc.Write(make([]byte, 700))
	io.ReadAll(dc)
	dc.Close()
	if iostat.DialedIn()-in0 != 50 || iostat.DialedOut()-out0 != 700 {
		t.Errorf("dialed in %d out %d, want 50 and 700", iostat.DialedIn()-in0, iostat.DialedOut()-out0)
	}

	ld := n.load()
	if in, out := ld.GetNetBytesIn()-iostat.DialedIn(), ld.GetNetBytesOut()-iostat.DialedOut(); in != 1000 || out != 300 {
		t.Errorf("servers' net in %d out %d, want 1000 and 300", in, out)
	}
	if ld.GetNetBytesIn() < 1050 || ld.GetNetBytesOut() < 1000 {
		t.Errorf("net in %d out %d: the dialed connection is not in them", ld.GetNetBytesIn(), ld.GetNetBytesOut())
	}
	if ld.GetDiskBytesWritten()-w0 < 4096 || ld.GetFsyncs()-s0 < 1 {
		t.Errorf("disk %d fsyncs %d after a 4 KiB write and a sync", ld.GetDiskBytesWritten()-w0, ld.GetFsyncs()-s0)
	}
	if ld.GetRssBytes() < 1<<20 || !ld.GetSharedProcess() {
		t.Errorf("rss %d shared %v", ld.GetRssBytes(), ld.GetSharedProcess())
	}
	if (*Node)(nil).CountListener(l) != l {
		t.Error("nil node wraps the listener")
	}
}

// A counted connection adds its bytes in batches (countBatch) while open,
// the rest at Close, and keeps the wrapped connection's ReadFrom.
func TestCountingConnBatches(t *testing.T) {
	var nc netCounters
	a, b := net.Pipe()
	c := &countingConn{Conn: a, c: &nc}
	go io.Copy(io.Discard, b)
	if _, err := c.Write(make([]byte, countBatch-1)); err != nil {
		t.Fatal(err)
	}
	if got := nc.out.Load(); got != 0 {
		t.Fatalf("counted %d bytes before a batch was full", got)
	}
	if _, err := c.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if got := nc.out.Load(); got != countBatch+9 {
		t.Fatalf("counted %d bytes after a full batch, want %d", got, countBatch+9)
	}
	if _, err := c.ReadFrom(io.LimitReader(zeros{}, 5)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := nc.out.Load(); got != countBatch+14 {
		t.Fatalf("counted %d bytes after Close, want %d", got, countBatch+14)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
