package buffer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"willow/buffer"
)

// segmentBytes returns the segment file a pool writes for a few records,
// as a seed for FuzzOpen.
func segmentBytes(f *testing.F, build func(p *buffer.Pool)) []byte {
	dir := f.TempDir()
	p, err := buffer.Open(dir, buffer.Options{Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	build(p)
	p.Close()
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000001.seg"))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzOpen feeds arbitrary bytes to Open as a segment file: it must never
// panic or fail, every entry it recovers must read back verified, and the
// pool must accept and keep a new append afterwards.
func FuzzOpen(f *testing.F) {
	ctx := context.Background()
	put := func(p *buffer.Pool, k, meta, v string) {
		p.Append(ctx, k, []byte(meta), bytes.NewReader([]byte(v)), int64(len(v)))
	}
	two := segmentBytes(f, func(p *buffer.Pool) {
		put(p, "raw/a", `{"ct":"image/jpeg"}`, "hello")
		put(p, "v/b/medium", "", "world!")
	})
	f.Add(two)
	f.Add(two[:len(two)-3])
	f.Add(segmentBytes(f, func(p *buffer.Pool) {
		put(p, "raw/a", "", "hello")
		p.Delete("raw/a")
		put(p, "raw/a", "m", "again")
	}))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, 100))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.seg"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := buffer.Options{Logger: quiet, Sync: buffer.SyncNone}
		p, err := buffer.Open(dir, opts)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer p.Close()
		list := p.List()
		for _, e := range list {
			got, ge, err := read(p, e.Key)
			if err != nil {
				t.Fatalf("recovered %q does not read back: %v", e.Key, err)
			}
			if int64(len(got)) != e.Size || ge.Size != e.Size {
				t.Fatalf("recovered %q: %d bytes, entry says %d", e.Key, len(got), e.Size)
			}
		}
		if s := p.Stats(); s.Items != len(list) || s.DeadBytes < 0 || s.Bytes < 0 {
			t.Fatalf("Stats %+v with %d listed", s, len(list))
		}
		const key = "fuzz/after"
		if err := p.Delete(key); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, p, key, []byte("m"), []byte("after recovery"))
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		q, err := buffer.Open(dir, opts)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer q.Close()
		mustRead(t, q, key, []byte("after recovery"))
		if n := len(q.List()); n != len(list)+1 && n != len(list) {
			t.Fatalf("reopen lists %d entries, first open %d (+1 appended)", n, len(list))
		}
	})
}
