package iostat

import (
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
	if Written()-w0 != 5 || Fsyncs()-s0 != 1 {
		t.Errorf("written %d, fsyncs %d", Written()-w0, Fsyncs()-s0)
	}
}
