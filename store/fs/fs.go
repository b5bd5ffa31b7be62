// Package fs is a store.Store on a local directory, for one box and tests.
// Put writes to a temporary file, fsyncs it, renames it into place and
// fsyncs the directory, so an acknowledged object survives a crash and a
// reader never sees a partial one. The content type is kept in a sidecar
// file written (without its own fsync) just before the object: after a
// crash an object may lose its content type, never its bytes, and readers
// sniff the type then. Info.ETag is left empty: readers hash the content
// themselves, and the store does not pay a second hash on every Put.
package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"willow/internal/ctxio"
	"willow/internal/iostat"
	"willow/store"
)

// Store is a directory-backed object store.
type Store struct {
	root string
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RangeGetter = (*Store)(nil)
	_ store.FileAdopter = (*Store)(nil)
	_ store.Preparer    = (*Store)(nil)
)

// New opens (creating if needed) a store rooted at dir.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
		return nil, fmt.Errorf("fs store: %w", err)
	}
	return &Store{root: dir}, nil
}

func (s *Store) path(key string) (string, error) {
	if key == "" || strings.Contains(key, "..") || strings.HasPrefix(key, "/") || strings.ContainsAny(key, "\x00\\") {
		return "", fmt.Errorf("fs store: bad key %q", key)
	}
	return filepath.Join(s.root, "objects", filepath.FromSlash(key)), nil
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	publish, _, err := s.Prepare(ctx, key, r, size, contentType)
	if err != nil {
		return err
	}
	return publish()
}

// Prepare implements store.Preparer: it writes r to a temporary file in
// key's directory and fsyncs it; publish writes the content type's
// sidecar, renames the file into place and fsyncs the directory, abort
// removes it.
func (s *Store) Prepare(ctx context.Context, key string, r io.Reader, size int64, contentType string) (publish func() error, abort func(), err error) {
	p, err := s.path(key)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, nil, fmt.Errorf("fs store: put %s: %w", key, err)
	}
	tmp, err := writeTemp(ctx, p, r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("fs store: put %s: %w", key, err)
	}
	publish = func() error {
		if err := os.WriteFile(p+".meta", []byte(contentType+"\n"), 0o644); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("fs store: put %s meta: %w", key, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			_ = os.Remove(tmp)
			if _, serr := os.Stat(p); errors.Is(serr, fs.ErrNotExist) {
				_ = os.Remove(p + ".meta")
			}
			return fmt.Errorf("fs store: put %s: %w", key, err)
		}
		if err := iostat.SyncDir(filepath.Dir(p)); err != nil {
			return fmt.Errorf("fs store: put %s: sync dir: %w", key, err)
		}
		return nil
	}
	return publish, func() { _ = os.Remove(tmp) }, nil
}

// AdoptFile implements store.FileAdopter: it hard-links path into the
// store (a temporary name, then rename and an fsync of the directory), so
// the bytes are neither read nor written again. When path is on another
// filesystem (or links are refused) it copies it like Put. The file must
// never be written again; the caller fsyncs it (store.FileAdopter).
func (s *Store) AdoptFile(ctx context.Context, key, path string, size int64, contentType string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("fs store: adopt %s: %w", key, err)
	}
	if size >= 0 && st.Size() != size {
		return fmt.Errorf("fs store: adopt %s: file has %d bytes, want %d", key, st.Size(), size)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("fs store: adopt %s: %w", key, err)
	}
	tmp := filepath.Join(filepath.Dir(p), fmt.Sprintf(".tmp-link-%016x", rand.Uint64()))
	if err := os.Link(path, tmp); err != nil {
		f, oerr := os.Open(path)
		if oerr != nil {
			return fmt.Errorf("fs store: adopt %s: %w", key, oerr)
		}
		defer f.Close()
		return s.Put(ctx, key, f, size, contentType)
	}
	if err := os.WriteFile(p+".meta", []byte(contentType+"\n"), 0o644); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("fs store: adopt %s meta: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("fs store: adopt %s: %w", key, err)
	}
	if err := iostat.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("fs store: adopt %s: %w", key, err)
	}
	return nil
}

// writeTemp writes r to a new temporary file next to p and fsyncs it; it
// returns the file's name. With size >= 0 a different byte count is an
// error and the file is removed.
func writeTemp(ctx context.Context, p string, r io.Reader, size int64) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return "", err
	}
	n, err := copyFrom(ctx, f, r, size)
	iostat.Wrote(int(n))
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("got %d bytes, want %d", n, size)
	}
	if err == nil {
		err = iostat.Sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// errShortSource: a file section given to Put ends before its length.
var errShortSource = errors.New("the source file ends before the section's end")

// copyFrom writes r to f. A section of a local file (an *io.SectionReader
// on an *os.File, as the upload front's staging mirror hands in) of the
// given size is copied inside the kernel where it can (copyRange), so
// its bytes are not read into this process and written back out; any
// other reader, or a section the kernel cannot copy, goes through io.Copy.
func copyFrom(ctx context.Context, f *os.File, r io.Reader, size int64) (int64, error) {
	if sr, ok := r.(*io.SectionReader); ok && size >= 0 {
		if src, off, n := sr.Outer(); n == size {
			if sf, ok := src.(*os.File); ok {
				if pos, err := sr.Seek(0, io.SeekCurrent); err == nil && pos == 0 {
					if k, handled, err := copyRange(ctx, f, sf, off, n); handled {
						return k, err
					}
				}
			}
		}
	}
	return io.Copy(f, ctxio.Reader(ctx, r))
}

func (s *Store) info(key, p string) (store.Info, error) {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && st.IsDir()) {
		return store.Info{}, fmt.Errorf("fs store: %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return store.Info{}, fmt.Errorf("fs store: %s: %w", key, err)
	}
	info := store.Info{Key: key, Size: st.Size(), ContentType: "application/octet-stream", Modified: st.ModTime().UTC()}
	if meta, err := os.ReadFile(p + ".meta"); err == nil {
		if ct, _, _ := strings.Cut(string(meta), "\n"); ct != "" {
			info.ContentType = ct
		}
	}
	return info, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, store.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, store.Info{}, err
	}
	info, err := s.info(key, p)
	if err != nil {
		return nil, info, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, info, fmt.Errorf("fs store: %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, info, fmt.Errorf("fs store: get %s: %w", key, err)
	}
	return f, info, nil
}

// GetRange implements store.RangeGetter.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, store.Info, error) {
	if off < 0 || n < 0 {
		return nil, store.Info{}, fmt.Errorf("fs store: get %s: bad range %d+%d", key, off, n)
	}
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	f := rc.(*os.File)
	return sectionFile{io.NewSectionReader(f, off, n), f}, info, nil
}

// sectionFile reads a section of a file and closes the file.
type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s sectionFile) Close() error { return s.f.Close() }

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, key string) (store.Info, error) {
	p, err := s.path(key)
	if err != nil {
		return store.Info{}, err
	}
	return s.info(key, p)
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	for _, q := range []string{p, p + ".meta"} {
		if err := os.Remove(q); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("fs store: delete %s: %w", key, err)
		}
	}
	return nil
}
