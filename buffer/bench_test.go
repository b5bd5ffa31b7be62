package buffer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"willow/buffer"
)

// BenchmarkAppend appends 1 MiB blobs under each sync policy, after the
// baseline of writing the same bytes sequentially to one file with an fsync
// after each write, in the same run. The baseline runs first so the page
// cache SyncNone leaves dirty does not slow it down.
func BenchmarkAppend(b *testing.B) {
	data := blob(1, 1<<20)
	b.Run("baseline/write+fsync", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		sync buffer.SyncPolicy
	}{
		{"pool/SyncEveryAppend", buffer.SyncEveryAppend},
		{"pool/SyncNone", buffer.SyncNone},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := open(b, b.TempDir(), buffer.Options{Sync: bc.sync, Logger: quiet})
			ctx := context.Background()
			r := bytes.NewReader(data)
			b.SetBytes(int64(len(data)))
			i := 0
			for b.Loop() {
				r.Reset(data)
				if err := p.Append(ctx, fmt.Sprintf("raw/%032x", i), []byte(`{"ct":"image/jpeg"}`), r, int64(len(data))); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
