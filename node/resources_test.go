package node

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"willow/internal/iostat"
)

// The heartbeat load carries the process's RSS, the bytes through the
// node's counted listeners and the disk counters.
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

	ld := n.load()
	if ld.GetNetBytesIn() != 1000 || ld.GetNetBytesOut() != 300 {
		t.Errorf("net in %d out %d, want 1000 and 300", ld.GetNetBytesIn(), ld.GetNetBytesOut())
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
