package fs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"willow/store"
	"willow/store/fs"
)

func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("willow"), 1000)
	if err := s.Put(ctx, "raw/abc", bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	rc, info, err := s.Get(ctx, "raw/abc")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) || info.Size != int64(len(data)) || info.ContentType != "image/jpeg" {
		t.Fatalf("get: %d bytes, info %+v", len(got), info)
	}
	// Overwrite is atomic and takes the new type.
	if err := s.Put(ctx, "raw/abc", strings.NewReader("x"), -1, "text/plain"); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "raw/abc"); err != nil || info.Size != 1 || info.ContentType != "text/plain" {
		t.Fatalf("stat after overwrite: %+v %v", info, err)
	}
	if err := s.Delete(ctx, "raw/abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "raw/abc"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	if _, _, err := s.Get(ctx, "raw/abc"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "v/none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
}

func TestPutRejects(t *testing.T) {
	ctx := context.Background()
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		key  string
		size int64
		ctx  func() context.Context
	}{
		{"size mismatch", "raw/short", 99, func() context.Context { return ctx }},
		{"dot-dot key", "../escape", -1, func() context.Context { return ctx }},
		{"absolute key", "/etc/passwd", -1, func() context.Context { return ctx }},
		{"empty key", "", -1, func() context.Context { return ctx }},
		{"cancelled", "raw/cancelled", -1, func() context.Context {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Put(tc.ctx(), tc.key, strings.NewReader("hello"), tc.size, ""); err == nil {
				t.Fatal("accepted")
			}
			if tc.key != "" && !strings.Contains(tc.key, "..") && !strings.HasPrefix(tc.key, "/") {
				if _, err := s.Stat(ctx, tc.key); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("a failed put left an object: %v", err)
				}
			}
		})
	}
}

func TestGetRange(t *testing.T) {
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := []byte(strings.Repeat("0123456789", 100))
	if err := s.Put(ctx, "raw/r", bytes.NewReader(data), int64(len(data)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ off, n, want int64 }{{0, 10, 10}, {995, 10, 5}, {1000, 10, 0}, {2000, 1, 0}} {
		rc, info, err := s.GetRange(ctx, "raw/r", tc.off, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(got)) != tc.want || (tc.want > 0 && !bytes.Equal(got, data[tc.off:tc.off+tc.want])) {
			t.Fatalf("GetRange(%d, %d) = %q, %v", tc.off, tc.n, got, err)
		}
		if info.Size != 1000 || info.ContentType != "video/mp4" || info.Modified.IsZero() {
			t.Fatalf("info = %+v", info)
		}
	}
	if _, _, err := s.GetRange(ctx, "raw/none", 0, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := s.GetRange(ctx, "raw/r", -1, 1); err == nil {
		t.Fatal("negative offset accepted")
	}
}

// TestAdoptFile: an adopted file is the object (same bytes, content type),
// a wrong size adopts nothing, and a missing file is an error.
func TestAdoptFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := fs.New(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("adopt"), 5000)
	src := dir + "/staged"
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.AdoptFile(ctx, "raw/k", src, int64(len(data)), "image/png"); err != nil {
		t.Fatal(err)
	}
	rc, info, err := s.Get(ctx, "raw/k")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) || info.ContentType != "image/png" {
		t.Fatalf("adopted object: %d bytes, %+v", len(got), info)
	}
	// The source may go away (the front removes its staging): the object stays.
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "raw/k"); err != nil || info.Size != int64(len(data)) {
		t.Fatalf("after removing the source: %+v %v", info, err)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.AdoptFile(ctx, "raw/short", src, int64(len(data))+1, "image/png"); err == nil {
		t.Fatal("size mismatch adopted")
	}
	if _, err := s.Stat(ctx, "raw/short"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("size mismatch left an object: %v", err)
	}
	if err := s.AdoptFile(ctx, "raw/none", dir+"/missing", 1, "image/png"); err == nil {
		t.Fatal("missing file adopted")
	}
}

// TestPrepare: a prepared object is invisible until published (an old
// object at the key stays readable meanwhile), and an aborted one leaves
// nothing behind, not even its temporary file.
func TestPrepare(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := fs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "m/rec.json", strings.NewReader("old"), 3, "application/json"); err != nil {
		t.Fatal(err)
	}
	publish, _, err := s.Prepare(ctx, "m/rec.json", strings.NewReader("new!"), 4, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "m/rec.json"); err != nil || info.Size != 3 {
		t.Fatalf("before publish: %+v %v, want the old 3 bytes", info, err)
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "m/rec.json"); err != nil || info.Size != 4 || info.ContentType != "application/json" {
		t.Fatalf("after publish: %+v %v", info, err)
	}

	_, abort, err := s.Prepare(ctx, "m/other.json", strings.NewReader("x"), 1, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	abort()
	if _, err := s.Stat(ctx, "m/other.json"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("aborted object: %v, want not found", err)
	}
	ents, err := os.ReadDir(dir + "/objects/m")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 { // rec.json and its .meta
		t.Fatalf("objects/m holds %v, want rec.json and rec.json.meta only", names)
	}
	if _, _, err := s.Prepare(ctx, "m/short.json", strings.NewReader("x"), 2, "application/json"); err == nil {
		t.Fatal("Prepare of 1 byte declared as 2 succeeded")
	}
}

// TestPutFileSection: a section of a local file (copied inside the kernel
// on Linux) is stored as exactly its bytes, from a file on the store's
// filesystem or elsewhere, the file's offset untouched; a section running
// past the file's end stores nothing; a cancelled context stops the copy.
func TestPutFileSection(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := fs.New(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 9<<20+123) // more than one copy step
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	for _, where := range []string{dir, "/dev/shm"} {
		f, err := os.CreateTemp(where, "section-*")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(5, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		off, n := int64(1<<20+17), int64(7<<20+5)
		if err := s.Put(ctx, "part/a", io.NewSectionReader(f, off, n), n, "application/octet-stream"); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		rc, info, err := s.Get(ctx, "part/a")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if info.Size != n || !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("%s: stored %d bytes, want bytes [%d, %d) of the file", where, len(got), off, off+n)
		}
		if pos, _ := f.Seek(0, io.SeekCurrent); pos != 5 {
			t.Fatalf("%s: the file's offset moved to %d", where, pos)
		}
		long := int64(len(data)) - off + 1
		if err := s.Put(ctx, "part/b", io.NewSectionReader(f, off, long), long, "application/octet-stream"); err == nil {
			t.Fatalf("%s: a section past the file's end was stored", where)
		}
		if _, err := s.Stat(ctx, "part/b"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s: after a short section: %v, want ErrNotFound", where, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, "part/c", io.NewSectionReader(f, 0, n), n, "application/octet-stream"); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: cancelled Put: %v", where, err)
		}
		if _, err := s.Stat(ctx, "part/c"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s: after a cancelled Put: %v, want ErrNotFound", where, err)
		}
	}
}
