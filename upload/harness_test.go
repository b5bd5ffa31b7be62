package upload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"willow/buffer"
	"willow/compress"
	"willow/limits"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/store"
	"willow/store/fs"
	"willow/token"
	"willow/upload"
)

var secret = []byte("test-secret")

// fakeCompress is a CompressServer that makes one tiny "thumb" variant (or
// video+poster). fail, when it returns an error, fails the call.
type fakeCompress struct {
	willowv1.UnimplementedCompressServer
	st    store.Store
	fail  atomic.Pointer[error]
	calls atomic.Int64
	// instant answers without reading the raw or writing variants
	// (benchmarks measure the upload path, not compress).
	instant bool
}

func (f *fakeCompress) Compress(ctx context.Context, req *willowv1.CompressRequest) (*willowv1.CompressResponse, error) {
	f.calls.Add(1)
	if p := f.fail.Load(); p != nil && *p != nil {
		return nil, *p
	}
	if f.instant {
		return &willowv1.CompressResponse{Variants: []*willowv1.Variant{{Name: "thumb", Bytes: 1}}}, nil
	}
	raw := req.GetData()
	if req.GetSourceKey() != "" {
		rc, _, err := f.st.Get(ctx, req.GetSourceKey())
		if err != nil {
			return nil, err
		}
		raw, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return nil, err
	}
	names := []string{"thumb", "medium", "large"}
	if req.GetKind() == willowv1.Kind_KIND_VIDEO {
		names = []string{"video", "poster"}
	}
	resp := &willowv1.CompressResponse{}
	for _, n := range names {
		data := []byte(fmt.Sprintf("%s of %x", n, sha256.Sum256(raw)))
		sum := sha256.Sum256(data)
		v := &willowv1.Variant{Name: n, Codec: "jpeg", Bytes: int64(len(data)), Sha256: hex.EncodeToString(sum[:]), ContentType: "image/jpeg"}
		if req.GetReturnData() {
			v.Data = data
		} else if err := f.st.Put(ctx, media.VariantKey(id.Key, n), bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
			return nil, err
		}
		resp.Variants = append(resp.Variants, v)
	}
	return resp, nil
}

func (f *fakeCompress) setFail(err error) { f.fail.Store(&err) }

// flakyStore fails every call while down is set.
type flakyStore struct {
	store.Store
	down atomic.Bool
}

var errDown = errors.New("store down (test)")

func (f *flakyStore) Put(ctx context.Context, key string, r io.Reader, size int64, ct string) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Put(ctx, key, r, size, ct)
}

// AdoptFile forwards the store's FileAdopter capability (fs), so tests and
// benchmarks run the front's real commit path.
func (f *flakyStore) AdoptFile(ctx context.Context, key, path string, size int64, ct string) error {
	if f.down.Load() {
		return errDown
	}
	if a, ok := f.Store.(store.FileAdopter); ok {
		return a.AdoptFile(ctx, key, path, size, ct)
	}
	r, err := os.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return f.Store.Put(ctx, key, r, size, ct)
}

// Prepare forwards the store's Preparer capability (fs), so tests and
// benchmarks run the front's real commit path; a store that lacks it gets
// the bytes as a Put at publish. A store down fails Prepare, and publish.
func (f *flakyStore) Prepare(ctx context.Context, key string, r io.Reader, size int64, ct string) (publish func() error, abort func(), err error) {
	if f.down.Load() {
		return nil, nil, errDown
	}
	p, ok := f.Store.(store.Preparer)
	if !ok {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, nil, err
		}
		return func() error { return f.Put(ctx, key, bytes.NewReader(b), size, ct) }, func() {}, nil
	}
	pub, ab, err := p.Prepare(ctx, key, r, size, ct)
	if err != nil {
		return nil, nil, err
	}
	return func() error {
		if f.down.Load() {
			ab()
			return errDown
		}
		return pub()
	}, ab, nil
}

func (f *flakyStore) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if f.down.Load() {
		return nil, store.Info{}, errDown
	}
	return f.Store.Get(ctx, key)
}

func (f *flakyStore) Stat(ctx context.Context, key string) (store.Info, error) {
	if f.down.Load() {
		return store.Info{}, errDown
	}
	return f.Store.Stat(ctx, key)
}

type front struct {
	t        testing.TB
	node     *node.Node
	srv      *upload.Server
	store    *flakyStore
	compress *fakeCompress
	// compressNode is the real compress worker's node (frontOpts.real).
	compressNode *node.Node
	pool1        *buffer.Pool
	pool2        *buffer.Pool
	poolDir      string // p1/ and p2/ under it
	client       willowv1.UploadClient
	shedReason   atomic.Pointer[string]
	cancel       context.CancelFunc
	done         sync.WaitGroup
}

type frontOpts struct {
	store   store.Store // default fs store in a temp dir
	redis   redis.UniversalClient
	staging string
	pools   bool
	// segBytes is the pools' MaxSegmentBytes (default buffer's).
	segBytes int64
	cfg      upload.Config
	instant  bool // instant fake compress
	// real runs the real compress worker (compress.Server, libjpeg,
	// libheif, ffmpeg) with these limits instead of the fake.
	real       bool
	realLimits limits.Limits
	// realWorkers is the real compress worker's slots (default compress's).
	realWorkers int
	id          string // node ID; default upload-a-1
	// shed installs the node's admission policy (node.Config.Shed); the
	// front then reads the real shedder's decision (no fake WouldShed).
	shed *shedding.Config
}

func newFront(t *testing.T, o frontOpts) *front { return newFrontB(t, o) }

// newFrontB builds a front for a test or a benchmark.
func newFrontB(tb testing.TB, o frontOpts) *front {
	tb.Helper()
	if o.store == nil {
		st, err := fs.New(tb.TempDir())
		if err != nil {
			tb.Fatal(err)
		}
		o.store = st
	}
	if o.staging == "" {
		o.staging = tb.TempDir()
	}
	f := &front{t: tb, store: &flakyStore{Store: o.store}}
	f.compress = &fakeCompress{st: o.store, instant: o.instant}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cn, err := node.New(node.Config{ID: "compress-a-1", Role: "compress", Region: "a", Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	if o.real {
		if _, err := compress.New(compress.Config{TempDir: tb.TempDir(), Limits: o.realLimits, Workers: o.realWorkers, Logger: quiet}, compress.Deps{Node: cn, Store: o.store}); err != nil {
			tb.Fatal(err)
		}
		f.compressNode = cn
	} else {
		// The fake answers the compress service's methods, classified by
		// its table like the real one.
		if err := cn.Guard().Declare(compress.Methods()); err != nil {
			tb.Fatal(err)
		}
		willowv1.RegisterCompressServer(cn.Server(), f.compress)
	}
	if o.id == "" {
		o.id = "upload-a-1"
	}
	un, err := node.New(node.Config{ID: o.id, Role: "upload", Region: "a", Logger: quiet, Shed: o.shed})
	if err != nil {
		tb.Fatal(err)
	}
	f.node = un
	if o.pools {
		dir := tb.TempDir()
		f.poolDir = dir
		if f.pool1, err = buffer.Open(filepath.Join(dir, "p1"), buffer.Options{Name: "pool1", Registerer: un.Registry(), MaxSegmentBytes: o.segBytes}); err != nil {
			tb.Fatal(err)
		}
		if f.pool2, err = buffer.Open(filepath.Join(dir, "p2"), buffer.Options{Name: "pool2", Registerer: un.Registry(), MaxSegmentBytes: o.segBytes}); err != nil {
			tb.Fatal(err)
		}
	}
	cconn, err := node.Dial(cn.Addr(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := o.cfg
	cfg.Secret = secret
	cfg.StagingDir = o.staging
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 200 * time.Millisecond
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	deps := upload.Deps{
		Node: un, Store: f.store, Redis: o.redis, Compress: willowv1.NewCompressClient(cconn),
		Pool1: f.pool1, Pool2: f.pool2,
	}
	if o.shed == nil {
		deps.WouldShed = func(context.Context) (string, bool) {
			if r := f.shedReason.Load(); r != nil {
				return *r, true
			}
			return "", false
		}
	}
	f.srv, err = upload.New(cfg, deps)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, run := range []func(context.Context) error{cn.Run, un.Run, f.srv.Run} {
		f.done.Add(1)
		go func() { defer f.done.Done(); _ = run(ctx) }()
	}
	conn, err := node.Dial(un.Addr(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	f.client = willowv1.NewUploadClient(conn)
	tb.Cleanup(func() {
		cancel()
		f.done.Wait()
		conn.Close()
		cconn.Close()
		if f.pool1 != nil {
			f.pool1.Close()
			f.pool2.Close()
		}
	})
	return f
}

// knobs pushes knob values to the front's node.
var flexVersion atomic.Int64

func (f *front) knobs(kv map[string]string) {
	f.node.ApplyFlex(&willowv1.FlexState{Version: flexVersion.Add(1), Level: "normal", Knobs: kv})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tok(t testing.TB, user, business string) string {
	s, err := token.Sign(secret, user, business, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func photo(t testing.TB) []byte {
	b, err := os.ReadFile("../../shared/testdata/photos/mate_Wood.jpg")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *front) begin(ctx context.Context, id, user string, data []byte) (*willowv1.BeginResponse, error) {
	return f.client.Begin(ctx, &willowv1.BeginRequest{UploadId: id, Token: tok(f.t, user, "moments"), Business: "moments",
		User: user, Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(data)), Sha256: sum(data), ContentType: "image/jpeg"})
}

func (f *front) send(ctx context.Context, id string, data []byte, from int64, chunk int) (int64, error) {
	s, err := f.client.Chunks(ctx)
	if err != nil {
		return 0, err
	}
	for off := from; off < int64(len(data)); off += int64(chunk) {
		end := min(off+int64(chunk), int64(len(data)))
		if err := s.Send(&willowv1.Chunk{UploadId: id, Offset: off, Data: data[off:end]}); err != nil {
			break
		}
	}
	r, err := s.CloseAndRecv()
	return r.GetOffset(), err
}

// upload runs Begin, Chunks, Commit.
func (f *front) upload(ctx context.Context, id, user string, data []byte) (*willowv1.CommitResponse, error) {
	b, err := f.begin(ctx, id, user, data)
	if err != nil {
		return nil, err
	}
	if !b.GetCommitted() {
		if _, err := f.send(ctx, id, data, b.GetOffset(), 256<<10); err != nil {
			return nil, err
		}
	}
	return f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: user})
}

func (f *front) mustUpload(ctx context.Context, id, user string, data []byte) *willowv1.CommitResponse {
	f.t.Helper()
	r, err := f.upload(ctx, id, user, data)
	if err != nil {
		f.t.Fatalf("upload %s: %v", id, err)
	}
	return r
}

// read reads a variant through ReadPool.
func (f *front) read(ctx context.Context, id, variant string) ([]byte, error) {
	s, err := f.client.ReadPool(ctx, &willowv1.ReadPoolRequest{MediaId: id, Variant: variant})
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c.GetData()...)
	}
}

func storeBytes(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, _, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("store get %s: %v", key, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return b
}

// eventually polls cond until it holds or 20 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var _ = grpc.WithBlock

func uploadCfgSmallSync() upload.Config { return upload.Config{SyncEvery: 64 << 10} }

// shed makes WouldShed report reason ("" stops shedding).
func (f *front) shed(reason string) {
	if reason == "" {
		f.shedReason.Store(nil)
		return
	}
	f.shedReason.Store(&reason)
}
