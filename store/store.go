// Package store defines the object store Willow keeps raw uploads, variants
// and media records in. Backends: store/s3 (any S3 API through minio-go) and
// store/fs (a local directory, for one box and tests).
//
// Every call takes a context and must return by its deadline. Put is atomic:
// a reader sees the whole object or none of it, and a Put that returned nil
// is durable.
package store

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) when an object does not exist.
var ErrNotFound = errors.New("object not found")

// Info describes a stored object.
type Info struct {
	Key         string
	Size        int64
	ContentType string
	ETag        string
	Modified    time.Time // when the object was written; zero if unknown
}

// Store is an object store.
type Store interface {
	// Put stores size bytes read from r under key. size -1 means unknown.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
	// Get opens an object; the caller closes it. Missing objects give
	// ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes an object without reading it.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
}

// RangeGetter is the optional capability of reading part of an object, so
// a reader of a large object never holds all of it.
type RangeGetter interface {
	// GetRange opens bytes [off, off+n) of an object (fewer at its end;
	// none when off is at or past the end); the caller closes it. Info
	// describes the whole object. Missing objects give ErrNotFound.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, Info, error)
}

// FileAdopter is the optional capability of storing a local file under a
// key without copying its bytes (store/fs: a hard link when the file is on
// the store's filesystem, a copy otherwise). The caller never changes the
// file afterwards and fsyncs it (before or alongside AdoptFile) before it
// relies on the object; a nil return then means, like Put, that the object
// is durable and readers see all of it or none.
type FileAdopter interface {
	AdoptFile(ctx context.Context, key, path string, size int64, contentType string) error
}

// Preparer is the optional capability of a Put in two steps, so that an
// object's bytes are made durable alongside other work and it appears only
// later (store/fs: the write and fsync of a temporary file, then its
// rename and the directory's fsync). Prepare makes r's bytes durable under
// a name no reader sees; publish puts them at key, and a nil return then
// means what Put's does; abort drops them. Exactly one of the two is
// called.
type Preparer interface {
	Prepare(ctx context.Context, key string, r io.Reader, size int64, contentType string) (publish func() error, abort func(), err error)
}
