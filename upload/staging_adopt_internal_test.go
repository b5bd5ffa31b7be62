package upload

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"willow/store/fs"
)

// TestAdoptedStagingNeverCut: once the fs store adopted a staged file by
// hard link, cutting the staging back (lost offset record after a crash,
// Reset) must leave the store's raw object whole.
func TestAdoptedStagingNeverCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(t *testing.T, st *staged, dir string) *staged
	}{
		{"reopen without offset record", func(t *testing.T, st *staged, dir string) *staged {
			st.Close()
			if err := os.Remove(filepath.Join(dir, fileOffset)); err != nil {
				t.Fatal(err)
			}
			st, err := openStaged(dir)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"reset", func(t *testing.T, st *staged, dir string) *staged {
			if err := st.Reset(); err != nil {
				t.Fatal(err)
			}
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "up")
			data := bytes.Repeat([]byte("raw bytes "), 10000)
			st, err := createStaged(dir, stageMeta{UploadID: "u", User: "x", Size: int64(len(data))})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Write(0, data, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Sync(); err != nil {
				t.Fatal(err)
			}
			s, err := fs.New(filepath.Join(root, "store"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.AdoptFile(ctx, "raw/u", filepath.Join(dir, fileData), int64(len(data)), "image/jpeg"); err != nil {
				t.Fatal(err)
			}
			st = tc.cut(t, st, dir)
			defer st.Close()
			if w, _ := st.Offsets(); w != 0 {
				t.Fatalf("staging kept %d bytes", w)
			}
			// The staging works on as a fresh file.
			if err := st.Write(0, []byte("new"), 0); err != nil {
				t.Fatal(err)
			}
			rc, _, err := s.Get(ctx, "raw/u")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, data) {
				t.Fatalf("raw object changed: %d bytes, want %d", len(got), len(data))
			}
		})
	}
}
