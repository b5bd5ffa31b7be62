package iostat

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestCounts(t *testing.T) {
	w0, s0 := Written(), Fsyncs()
	f, err := os.Create(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Write([]byte("hello"))
	Wrote(n)
	Wrote(-1)
	if err := Sync(f); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Dir(f.Name())); err != nil {
		t.Fatal(err)
	}
	if Written()-w0 != 5 || Fsyncs()-s0 != 2 {
		t.Errorf("written %d, fsyncs %d", Written()-w0, Fsyncs()-s0)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("SyncDir of a missing directory: no error")
	}
}

func TestCountWriterAndDial(t *testing.T) {
	w0 := Written()
	var b bytes.Buffer
	if n, err := CountWriter(&b).Write(make([]byte, 123)); n != 123 || err != nil || Written()-w0 != 123 {
		t.Fatalf("CountWriter: %d %v, written %d", n, err, Written()-w0)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, 10))
		c.Write([]byte("hello"))
		c.Close()
	}()
	in0, out0 := DialedIn(), DialedOut()
	c, err := Dial(nil)(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write(make([]byte, 10))
	io.ReadAll(c)
	c.Close()
	if DialedIn()-in0 != 5 || DialedOut()-out0 != 10 {
		t.Errorf("dialed in %d out %d, want 5 and 10", DialedIn()-in0, DialedOut()-out0)
	}
	if _, err := Dial(nil)(context.Background(), "tcp", "127.0.0.1:1"); err == nil {
		t.Error("dial to a closed port succeeded")
	}
}
