// Package s3 is a store.Store on any S3 API (MinIO, Ceph RGW, AWS S3,
// versitygw) through minio-go.
//
// Guarantees: Put is atomic (S3 publishes an object only when its single
// PUT or its multipart upload completes) and durable once it returns nil, as
// durable as the S3 service makes it. Puts of unknown size (-1) or above
// PartSize go multipart with parts of exactly PartSize bytes, read one part
// at a time, so one Put buffers at most PartSize bytes (minio-go's own
// default for unknown sizes is hundreds of MiB). Missing objects give
// store.ErrNotFound. Every call runs under the caller's deadline, or
// Config.Timeout when the caller set none.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"willow/internal/iostat"
	"willow/store"
)

// Part size bounds and defaults.
const (
	DefaultPartSize = 16 << 20
	MinPartSize     = 5 << 20 // S3's minimum part size
	MaxPartSize     = 64 << 20
	DefaultTimeout  = 2 * time.Minute
	DefaultRegion   = "us-east-1"
)

// Config configures a Store. Zero values mean the documented default.
type Config struct {
	Endpoint  string // host:port; required
	Bucket    string // required; created if missing
	AccessKey string
	SecretKey string
	Region    string // default DefaultRegion
	Secure    bool   // HTTPS
	// PartSize is the multipart part size and so the most one Put
	// buffers; default DefaultPartSize, clamped to [MinPartSize, MaxPartSize].
	PartSize int64
	// Timeout bounds a call whose context has no deadline; default
	// DefaultTimeout.
	Timeout time.Duration
}

// API is the part of minio-go's client the store uses.
type API interface {
	BucketExists(ctx context.Context, bucket string) (bool, error)
	MakeBucket(ctx context.Context, bucket string, opts minio.MakeBucketOptions) error
	PutObject(ctx context.Context, bucket, object string, r io.Reader, size int64, opts minio.PutObjectOptions) (minio.UploadInfo, error)
	GetObject(ctx context.Context, bucket, object string, opts minio.GetObjectOptions) (*minio.Object, error)
	StatObject(ctx context.Context, bucket, object string, opts minio.StatObjectOptions) (minio.ObjectInfo, error)
	RemoveObject(ctx context.Context, bucket, object string, opts minio.RemoveObjectOptions) error
}

// Store is an S3 bucket as a store.Store.
type Store struct {
	api    API
	bucket string
	part   uint64
	region string
	tmo    time.Duration
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.RangeGetter = (*Store)(nil)
)

// New connects to cfg.Endpoint and creates the bucket when it is missing.
func New(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("s3 store: Endpoint and Bucket are required")
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	// minio-go's own transport, dialing through iostat so the store's
	// traffic counts in heartbeats.
	tr, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	tr.DialContext = iostat.Dial(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.Secure,
		Region:    cfg.Region,
		Transport: tr,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	return NewWithAPI(cfg, c)
}

// NewWithAPI is New over a given client (a minio.Client or a fake).
func NewWithAPI(cfg Config, api API) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 store: Bucket is required")
	}
	s := &Store{api: api, bucket: cfg.Bucket, part: uint64(PartSize(cfg.PartSize)), region: cfg.Region, tmo: cfg.Timeout}
	if s.region == "" {
		s.region = DefaultRegion
	}
	if s.tmo <= 0 {
		s.tmo = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.tmo)
	defer cancel()
	ok, err := api.BucketExists(ctx, s.bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 store: bucket %s: %w", s.bucket, err)
	}
	if !ok {
		if err := api.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.region}); err != nil {
			code := minio.ToErrorResponse(err).Code
			if code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
				return nil, fmt.Errorf("s3 store: make bucket %s: %w", s.bucket, err)
			}
		}
	}
	return s, nil
}

// PartSize returns the part size a Config with PartSize n uses.
func PartSize(n int64) int64 {
	switch {
	case n <= 0:
		return DefaultPartSize
	case n < MinPartSize:
		return MinPartSize
	case n > MaxPartSize:
		return MaxPartSize
	}
	return n
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.tmo)
}

// mapErr turns S3 "no such key" answers into store.ErrNotFound.
func mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	r := minio.ToErrorResponse(err)
	if r.Code == "NoSuchKey" || r.Code == "NotFound" || r.StatusCode == http.StatusNotFound {
		return fmt.Errorf("s3 store: %s %s: %w", op, key, store.ErrNotFound)
	}
	return fmt.Errorf("s3 store: %s %s: %w", op, key, err)
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	_, err := s.api.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{
		ContentType: contentType,
		PartSize:    s.part,
		NumThreads:  1,
	})
	return mapErr("put", key, err)
}

// Get implements store.Store. The returned reader is bound to ctx (or to
// Config.Timeout when ctx has no deadline) until it is closed.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	ctx, cancel := s.ctx(ctx)
	obj, err := s.api.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		cancel()
		return nil, store.Info{}, mapErr("get", key, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		cancel()
		return nil, store.Info{}, mapErr("get", key, err)
	}
	return &reader{Object: obj, cancel: cancel}, info(key, oi), nil
}

// GetRange implements store.RangeGetter: a StatObject for the whole
// object's Info, then a GET of only the range.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, store.Info, error) {
	if off < 0 || n < 0 {
		return nil, store.Info{}, fmt.Errorf("s3 store: get %s: bad range %d+%d", key, off, n)
	}
	ctx, cancel := s.ctx(ctx)
	oi, err := s.api.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		cancel()
		return nil, store.Info{}, mapErr("get", key, err)
	}
	inf := info(key, oi)
	if off >= oi.Size || n == 0 {
		cancel()
		return io.NopCloser(strings.NewReader("")), inf, nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, min(off+n, oi.Size)-1); err != nil {
		cancel()
		return nil, store.Info{}, fmt.Errorf("s3 store: get %s: %w", key, err)
	}
	obj, err := s.api.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		cancel()
		return nil, store.Info{}, mapErr("get", key, err)
	}
	return &reader{Object: obj, cancel: cancel}, inf, nil
}

type reader struct {
	*minio.Object
	cancel context.CancelFunc
}

func (r *reader) Close() error {
	err := r.Object.Close()
	r.cancel()
	return err
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, key string) (store.Info, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	oi, err := s.api.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return store.Info{}, mapErr("stat", key, err)
	}
	return info(key, oi), nil
}

// Delete implements store.Store; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	err := mapErr("delete", key, s.api.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

func info(key string, oi minio.ObjectInfo) store.Info {
	return store.Info{Key: key, Size: oi.Size, ContentType: oi.ContentType, ETag: oi.ETag, Modified: oi.LastModified.UTC()}
}
