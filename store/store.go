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
)

// ErrNotFound is returned (wrapped) when an object does not exist.
var ErrNotFound = errors.New("object not found")

// Info describes a stored object.
type Info struct {
	Key         string
	Size        int64
	ContentType string
	ETag        string
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
