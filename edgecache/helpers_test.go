package edgecache_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/edgecache"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
	fsstore "willow/store/fs"
)

// countingStore wraps a real directory store, counts Gets and lets a test
// hook them with a function field.
type countingStore struct {
	store.Store
	gets   atomic.Int64                                // Gets and GetRanges
	ranged atomic.Int64                                // GetRanges
	read   atomic.Int64                                // bytes read through either
	before func(ctx context.Context, key string) error // optional, runs first
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	c.gets.Add(1)
	if c.before != nil {
		if err := c.before(ctx, key); err != nil {
			return nil, store.Info{}, err
		}
	}
	rc, info, err := c.Store.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	return countReader{rc, &c.read}, info, nil
}

// GetRange implements store.RangeGetter when the wrapped store does.
func (c *countingStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, store.Info, error) {
	c.gets.Add(1)
	c.ranged.Add(1)
	if c.before != nil {
		if err := c.before(ctx, key); err != nil {
			return nil, store.Info{}, err
		}
	}
	rc, info, err := c.Store.(store.RangeGetter).GetRange(ctx, key, off, n)
	if err != nil {
		return nil, info, err
	}
	return countReader{rc, &c.read}, info, nil
}

type countReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	r.n.Add(int64(n))
	return n, err
}

func newStore(t testing.TB) *countingStore {
	t.Helper()
	fs, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &countingStore{Store: fs}
}

// put stores a variant of a new media item and returns its ID.
func put(t testing.TB, st store.Store, loc media.Loc, n int, variant, contentType string, data []byte) media.ID {
	t.Helper()
	id := media.ID{Loc: loc, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", fmt.Sprint("up", n))}
	key := media.VariantKey(id.Key, variant)
	if variant == media.VariantRaw {
		key = media.RawKey(id.Key)
	}
	if err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), contentType); err != nil {
		t.Fatal(err)
	}
	return id
}

// payload returns n bytes that sniff as HEIC (the edge serves what the
// bytes are) when n allows a header.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	copy(b, "\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
	return b
}

type edge struct {
	node *node.Node
	srv  *edgecache.Server
	url  string // http://HTTPAddr
}

// startEdge builds and runs a node and its edge cache until the test ends.
func startEdge(t testing.TB, id string, cfg edgecache.Config, deps edgecache.Deps) *edge {
	t.Helper()
	return startEdgeNode(t, node.Config{ID: id, Role: "edgecache", Region: "a"}, cfg, deps)
}

// quiet logs only with -v.
func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}

func startEdgeNode(t testing.TB, ncfg node.Config, cfg edgecache.Config, deps edgecache.Deps) *edge {
	t.Helper()
	if ncfg.Logger == nil {
		ncfg.Logger = quiet()
	}
	n, err := node.New(ncfg)
	if err != nil {
		t.Fatal(err)
	}
	deps.Node = n
	s, err := edgecache.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nodeDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { srvDone <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-srvDone; err != nil {
			t.Errorf("edge Run: %v", err)
		}
		<-nodeDone
	})
	if n.Info().GetHttpAddr() != s.HTTPAddr() {
		t.Fatalf("node advertises %q, server listens on %q", n.Info().GetHttpAddr(), s.HTTPAddr())
	}
	return &edge{node: n, srv: s, url: "http://" + s.HTTPAddr()}
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, url, hdr)
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// fakeRouter answers Route from fixed endpoint lists and dials directly.
type fakeRouter struct {
	routes map[string][]*willowv1.Endpoint // by role
}

func (r *fakeRouter) Route(_ context.Context, role, _ string) (*willowv1.RouteResponse, error) {
	return &willowv1.RouteResponse{Primary: r.routes[role], PrimaryRegion: "a"}, nil
}

func (r *fakeRouter) Conn(addr string) (*grpc.ClientConn, error) { return node.Dial(addr, nil) }

// fakeUpload is an UploadServer whose ReadPool is a function field.
type fakeUpload struct {
	willowv1.UnimplementedUploadServer
	readPool func(*willowv1.ReadPoolRequest, willowv1.Upload_ReadPoolServer) error
}

func (f *fakeUpload) ReadPool(req *willowv1.ReadPoolRequest, st willowv1.Upload_ReadPoolServer) error {
	return f.readPool(req, st)
}

// serveGRPC serves srv on a real loopback listener until the test ends.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func path(id media.ID, variant string) string { return "/m/" + id.String() + "/" + variant }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// fakeEdge is an EdgeCacheServer whose Get is a function field.
type fakeEdge struct {
	willowv1.UnimplementedEdgeCacheServer
	get func(*willowv1.GetRequest, willowv1.EdgeCache_GetServer) error
}

func (f *fakeEdge) Get(req *willowv1.GetRequest, st willowv1.EdgeCache_GetServer) error {
	return f.get(req, st)
}

// counterValue returns the value of a counter of the node's registry whose
// one label has value label (0 when absent).
func counterValue(t testing.TB, n *node.Node, name, label string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
