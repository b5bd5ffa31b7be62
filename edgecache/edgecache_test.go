package edgecache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/edgecache"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/urlsign"
)

func TestHTTP(t *testing.T) {
	st := newStore(t)
	data := payload(1000, 1)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", data)
	p1 := media.ID{Loc: media.LocPool1, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "never")}
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})

	resp, _ := get(t, e.url+path(id, media.VariantThumb), nil)
	etag := resp.Header.Get("ETag")
	if len(etag) < 3 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		t.Fatalf("ETag %q is not a quoted strong tag", etag)
	}

	for _, tc := range []struct {
		name        string
		method      string
		path        string
		hdr         map[string]string
		code        int
		body        []byte // nil: not checked
		contentRng  string
		contentLen  string
		wantReason  string // JSON error reason
		cacheHeader bool
	}{
		{name: "get", path: path(id, "thumb"), code: 200, body: data, contentLen: "1000", cacheHeader: true},
		{name: "head", method: http.MethodHead, path: path(id, "thumb"), code: 200, body: []byte{}, contentLen: "1000", cacheHeader: true},
		{name: "range head of file", path: path(id, "thumb"), hdr: map[string]string{"Range": "bytes=0-99"}, code: 206, body: data[:100], contentRng: "bytes 0-99/1000", contentLen: "100"},
		{name: "range suffix", path: path(id, "thumb"), hdr: map[string]string{"Range": "bytes=-10"}, code: 206, body: data[990:], contentRng: "bytes 990-999/1000"},
		{name: "range open end", path: path(id, "thumb"), hdr: map[string]string{"Range": "bytes=995-"}, code: 206, body: data[995:], contentRng: "bytes 995-999/1000"},
		{name: "range past end", path: path(id, "thumb"), hdr: map[string]string{"Range": "bytes=2000-3000"}, code: 416, contentRng: "bytes */1000"},
		{name: "if-none-match same", path: path(id, "thumb"), hdr: map[string]string{"If-None-Match": etag}, code: 304, body: []byte{}},
		{name: "if-none-match other", path: path(id, "thumb"), hdr: map[string]string{"If-None-Match": `"other"`}, code: 200, body: data},
		{name: "if-none-match with range", path: path(id, "thumb"), hdr: map[string]string{"If-None-Match": etag, "Range": "bytes=0-9"}, code: 304},
		{name: "malformed id", path: "/m/not-an-id/thumb", code: 400, wantReason: edgecache.ReasonBadID},
		{name: "bad key", path: "/m/s.a.upload-a-1.XYZ/thumb", code: 400, wantReason: edgecache.ReasonBadID},
		{name: "bad variant", path: path(id, "huge"), code: 400, wantReason: edgecache.ReasonBadID},
		{name: "extra segment", path: path(id, "thumb") + "/x", code: 400, wantReason: edgecache.ReasonBadID},
		{name: "unknown id", path: path(media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "none")}, "thumb"), code: 404, wantReason: rpcstatus.ReasonNotFound},
		{name: "unknown variant of known id", path: path(id, "large"), code: 404, wantReason: rpcstatus.ReasonNotFound},
		{name: "pool 1 still processing", path: path(p1, "thumb"), code: 404, wantReason: media.ReasonProcessing},
		{name: "other path", path: "/x", code: 404, wantReason: rpcstatus.ReasonNotFound},
		{name: "post", method: http.MethodPost, path: path(id, "thumb"), code: 405, wantReason: "method"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			resp, body := do(t, method, e.url+tc.path, tc.hdr)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, tc.code, body)
			}
			if tc.body != nil && string(body) != string(tc.body) {
				t.Errorf("body: %d bytes, want %d", len(body), len(tc.body))
			}
			if tc.contentRng != "" && resp.Header.Get("Content-Range") != tc.contentRng {
				t.Errorf("Content-Range %q, want %q", resp.Header.Get("Content-Range"), tc.contentRng)
			}
			if tc.contentLen != "" && resp.Header.Get("Content-Length") != tc.contentLen {
				t.Errorf("Content-Length %q, want %q", resp.Header.Get("Content-Length"), tc.contentLen)
			}
			if tc.cacheHeader {
				if got := resp.Header.Get("Content-Type"); got != "image/heic" {
					t.Errorf("Content-Type %q", got)
				}
				if got := resp.Header.Get("ETag"); got != etag {
					t.Errorf("ETag %q, want %q", got, etag)
				}
				if got := resp.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
					t.Errorf("Cache-Control %q", got)
				}
			}
			if tc.wantReason != "" {
				var e struct{ Error, Reason string }
				if err := json.Unmarshal(body, &e); err != nil || e.Reason != tc.wantReason || e.Error == "" {
					t.Errorf("body %s: want JSON error with reason %q", body, tc.wantReason)
				}
			}
		})
	}
	if n := st.gets.Load(); n > 6 {
		t.Errorf("%d store reads; cached hits should not read the store", n)
	}
}

func TestOneOriginFetchUnderConcurrentMisses(t *testing.T) {
	st := newStore(t)
	data := payload(50_000, 2)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/jpeg", data)
	release := make(chan struct{})
	st.before = func(ctx context.Context, _ string) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	const clients = 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(e.url + path(id, media.VariantMedium))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || len(b) != len(data) {
				errs <- fmt.Errorf("status %d, %d bytes", resp.StatusCode, len(b))
			}
		}()
	}
	waitFor(t, "the first origin read", func() bool { return st.gets.Load() >= 1 })
	time.Sleep(100 * time.Millisecond) // let the other requests queue up on the miss
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d origin reads for %d concurrent misses, want 1", n, clients)
	}
}

// zeroHash puts every key and ring point at 0, so the member with the
// smallest name (edge-a-1) owns every object.
func zeroHash([]byte) uint64 { return 0 }

func TestPeerOwnerServesOncePerOC(t *testing.T) {
	st := newStore(t)
	data := payload(4000, 3)
	id := put(t, st, media.LocStore, 1, media.VariantLarge, "image/heic", data)
	cfg := edgecache.Config{Hash: zeroHash}
	owner := startEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	other := startEdge(t, "edge-a-2", cfg, edgecache.Deps{Store: st})
	owner.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-2", Addr: other.node.Addr()}})
	other.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-1", Addr: owner.node.Addr()}})

	for i, e := range []*edge{other, owner, other, owner} {
		resp, body := get(t, e.url+path(id, media.VariantLarge), nil)
		if resp.StatusCode != 200 || string(body) != string(data) {
			t.Fatalf("request %d: status %d, %d bytes", i, resp.StatusCode, len(body))
		}
		if got := resp.Header.Get("Content-Type"); got != "image/heic" {
			t.Fatalf("request %d: Content-Type %q through the peer", i, got)
		}
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d origin reads across the OC, want 1", n)
	}
	// A missing object: the owner's NOT_FOUND comes back as 404.
	missing := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u", "gone")}
	if resp, _ := get(t, other.url+path(missing, "thumb"), nil); resp.StatusCode != 404 {
		t.Fatalf("missing through peer: status %d", resp.StatusCode)
	}
}

func TestOwnerPeerDownStillServed(t *testing.T) {
	st := newStore(t)
	data := payload(3000, 4)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", data)
	e := startEdge(t, "edge-a-2", edgecache.Config{Hash: zeroHash, PeerTimeout: 2 * time.Second}, edgecache.Deps{Store: st})
	e.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-1", Addr: deadAddr(t)}})
	for i := range 2 {
		resp, body := get(t, e.url+path(id, media.VariantThumb), nil)
		if resp.StatusCode != 200 || string(body) != string(data) {
			t.Fatalf("request %d: status %d, %d bytes", i, resp.StatusCode, len(body))
		}
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d origin reads, want 1 (the second request is a hit)", n)
	}
}

func TestPeersFromRouter(t *testing.T) {
	st := newStore(t)
	data := payload(2000, 5)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", data)
	owner := startEdge(t, "edge-a-1", edgecache.Config{Hash: zeroHash}, edgecache.Deps{Store: st})
	r := &fakeRouter{routes: map[string][]*willowv1.Endpoint{"edgecache": {
		{NodeId: "edge-a-1", Addr: owner.node.Addr(), Region: "a"},
		{NodeId: "edge-a-9", Addr: deadAddr(t), Region: "b"}, // other region: not a member
	}}}
	other := startEdge(t, "edge-a-2", edgecache.Config{Hash: zeroHash, RefreshInterval: 50 * time.Millisecond}, edgecache.Deps{Store: st, Router: r})
	waitFor(t, "ring from router", func() bool { return len(other.srv.Members()) == 2 })
	if got := other.srv.Members(); got[0] != "edge-a-1" || got[1] != "edge-a-2" {
		t.Fatalf("members %v", got)
	}
	// The request goes through the owner.
	if resp, _ := get(t, other.url+path(id, media.VariantThumb), nil); resp.StatusCode != 200 || st.gets.Load() != 1 {
		t.Fatalf("other: status %d, %d origin reads", resp.StatusCode, st.gets.Load())
	}
	if resp, _ := get(t, owner.url+path(id, media.VariantThumb), nil); resp.StatusCode != 200 || st.gets.Load() != 1 {
		t.Fatalf("owner: status %d, %d origin reads", resp.StatusCode, st.gets.Load())
	}
}

func TestPool2BeforeAndAfterDrain(t *testing.T) {
	st := newStore(t)
	data := payload(6000, 6)
	copy(data, "\xff\xd8\xff\xe0") // a JPEG, as the front says
	id := media.ID{Loc: media.LocPool2, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "p2")}
	var drained sync.Mutex // held while the pool still has the item
	inPool := true
	var poolReads int
	up := &fakeUpload{readPool: func(req *willowv1.ReadPoolRequest, s willowv1.Upload_ReadPoolServer) error {
		drained.Lock()
		defer drained.Unlock()
		poolReads++
		if req.GetMediaId() != id.String() || req.GetVariant() != media.VariantRaw {
			return status.Errorf(codes.InvalidArgument, "unexpected %s/%s", req.GetMediaId(), req.GetVariant())
		}
		if !inPool {
			return rpcstatus.New(codes.NotFound, rpcstatus.ReasonNotFound, "drained to the store")
		}
		if err := s.Send(&willowv1.DataChunk{Data: data[:1000], Size: int64(len(data)), ContentType: "image/jpeg", Etag: "front-etag"}); err != nil {
			return err
		}
		return s.Send(&willowv1.DataChunk{Data: data[1000:]})
	}}
	addr := serveGRPC(t, func(s *grpc.Server) { willowv1.RegisterUploadServer(s, up) })
	r := &fakeRouter{routes: map[string][]*willowv1.Endpoint{"upload": {{NodeId: "upload-a-1", Addr: addr, Region: "a"}}}}

	before := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st, Router: r})
	resp, body := get(t, before.url+path(id, media.VariantRaw), nil)
	if resp.StatusCode != 200 || string(body) != string(data) || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("from pool 2: status %d, %d bytes, %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
	etag := resp.Header.Get("ETag")
	if st.gets.Load() != 0 || poolReads != 1 {
		t.Fatalf("%d store reads, %d pool reads; want 0, 1", st.gets.Load(), poolReads)
	}

	// The pool drains the item into the store.
	drained.Lock()
	inPool = false
	drained.Unlock()
	if err := st.Put(context.Background(), media.RawKey(id.Key), bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	after := startEdge(t, "edge-a-3", edgecache.Config{}, edgecache.Deps{Store: st, Router: r})
	resp, body = get(t, after.url+path(id, media.VariantRaw), nil)
	if resp.StatusCode != 200 || string(body) != string(data) || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("after drain: status %d, %d bytes, %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("ETag") != etag {
		t.Fatalf("ETag changed across the drain: %q then %q", etag, resp.Header.Get("ETag"))
	}
	if poolReads != 2 {
		t.Fatalf("%d pool reads, want 2", poolReads)
	}

	// The front is gone from the router's lists: straight to the store.
	gone := startEdge(t, "edge-a-4", edgecache.Config{}, edgecache.Deps{Store: st, Router: &fakeRouter{}})
	if resp, _ := get(t, gone.url+path(id, media.VariantRaw), nil); resp.StatusCode != 200 {
		t.Fatalf("front gone: status %d", resp.StatusCode)
	}
}

func TestRetriesKnob(t *testing.T) {
	for _, tc := range []struct {
		retries   string
		code      int
		storeGets int64
	}{
		{"on", 200, 2},
		{"off", 503, 1},
	} {
		t.Run("retries="+tc.retries, func(t *testing.T) {
			st := newStore(t)
			id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", payload(100, 7))
			var failed sync.Once
			st.before = func(context.Context, string) error {
				err := errors.New("store down")
				ok := true
				failed.Do(func() { ok = false })
				if ok {
					return nil
				}
				return err
			}
			e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
			e.node.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"retries": tc.retries}})
			resp, body := get(t, e.url+path(id, media.VariantThumb), nil)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.code, body)
			}
			if n := st.gets.Load(); n != tc.storeGets {
				t.Fatalf("%d store reads, want %d", n, tc.storeGets)
			}
		})
	}
}

func TestShedRatio(t *testing.T) {
	sc := shedding.Config{}
	for _, ncfg := range []node.Config{
		{ID: "edge-a-1", Role: "edgecache", Region: "a"},
		{ID: "edge-a-1", Role: "edgecache", Region: "a", Shed: &sc},
	} {
		t.Run(fmt.Sprintf("node shedding policy %v", ncfg.Shed != nil), func(t *testing.T) {
			testShedRatio(t, ncfg)
		})
	}
}

func testShedRatio(t *testing.T, ncfg node.Config) {
	st := newStore(t)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", payload(100, 8))
	e := startEdgeNode(t, ncfg, edgecache.Config{}, edgecache.Deps{Store: st})
	e.node.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"shed_ratio.moments": "1"}})
	// The shedding policy rereads the knobs every shedding.KnobRefresh.
	waitFor(t, "the knob to apply", func() bool {
		resp, _ := get(t, e.url+path(id, "thumb"), nil)
		return resp.StatusCode == 429
	})
	for _, tc := range []struct {
		name string
		url  string
		hdr  map[string]string
		code int
	}{
		{"default business", path(id, "thumb"), nil, 429},
		{"header", path(id, "thumb"), map[string]string{"Willow-Business": "moments", "Willow-User": "u1"}, 429},
		{"query", path(id, "thumb") + "?b=moments&u=u2", nil, 429},
		{"other business", path(id, "thumb") + "?b=ads", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, e.url+tc.url, tc.hdr)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code == 429 && (resp.Header.Get("Retry-After") == "" || !contains(string(body), shedding.ReasonShedRatio)) {
				t.Fatalf("429 without Retry-After or reason: %v %s", resp.Header, body)
			}
		})
	}
	conn, err := node.Dial(e.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "willow-business", "moments", "willow-user", "u1")
	stream, err := willowv1.NewEdgeCacheClient(conn).Get(ctx, &willowv1.GetRequest{MediaId: id.String(), Variant: "thumb"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != shedding.ReasonShedRatio {
		t.Fatalf("gRPC: %v (reason %q), want RESOURCE_EXHAUSTED shed_ratio", err, rpcstatus.Reason(err))
	}
}

func TestGRPCGet(t *testing.T) {
	st := newStore(t)
	data := payload(200_000, 9) // several chunks
	copy(data, "\x00\x00\x00\x14ftypisom\x00\x00\x02\x00isom")
	id := put(t, st, media.LocStore, 1, media.VariantVideo, "video/mp4", data)
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	conn, err := node.Dial(e.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewEdgeCacheClient(conn)
	httpResp, _ := get(t, e.url+path(id, media.VariantVideo), nil)

	for _, tc := range []struct {
		name           string
		req            *willowv1.GetRequest
		code           codes.Code
		reason         string
		from, to       int
		wantFirstMeta  bool
		wantChunksOver int
	}{
		{name: "whole", req: &willowv1.GetRequest{MediaId: id.String(), Variant: "video"}, from: 0, to: len(data), wantChunksOver: 1},
		{name: "range", req: &willowv1.GetRequest{MediaId: id.String(), Variant: "video", Offset: 100, Length: 50}, from: 100, to: 150},
		{name: "offset to end", req: &willowv1.GetRequest{MediaId: id.String(), Variant: "video", Offset: 199_990}, from: 199_990, to: len(data)},
		{name: "length past end", req: &willowv1.GetRequest{MediaId: id.String(), Variant: "video", Offset: 199_990, Length: 100}, from: 199_990, to: len(data)},
		{name: "offset past end", req: &willowv1.GetRequest{MediaId: id.String(), Variant: "video", Offset: 300_000}, code: codes.OutOfRange, reason: edgecache.ReasonRange},
		{name: "malformed", req: &willowv1.GetRequest{MediaId: "nope", Variant: "video"}, code: codes.InvalidArgument, reason: edgecache.ReasonBadID},
		{name: "unknown", req: &willowv1.GetRequest{MediaId: media.ID{Loc: media.LocStore, Region: "a", Node: "n", Key: media.KeyFor("x", "y")}.String(), Variant: "video"}, code: codes.NotFound, reason: rpcstatus.ReasonNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := c.Get(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			var chunks int
			for {
				m, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					if tc.code == codes.OK || status.Code(err) != tc.code || rpcstatus.Reason(err) != tc.reason {
						t.Fatalf("error %v (reason %q), want %v %q", err, rpcstatus.Reason(err), tc.code, tc.reason)
					}
					return
				}
				if chunks == 0 {
					if m.GetSize() != int64(len(data)) || m.GetContentType() != "video/mp4" || m.GetEtag() != httpResp.Header.Get("ETag") {
						t.Fatalf("first chunk: size %d type %q etag %q", m.GetSize(), m.GetContentType(), m.GetEtag())
					}
				}
				chunks++
				got = append(got, m.GetData()...)
			}
			if tc.code != codes.OK {
				t.Fatalf("no error, want %v", tc.code)
			}
			if string(got) != string(data[tc.from:tc.to]) {
				t.Fatalf("got %d bytes, want [%d:%d]", len(got), tc.from, tc.to)
			}
			if chunks <= tc.wantChunksOver && tc.wantChunksOver > 0 {
				t.Fatalf("%d chunks", chunks)
			}
		})
	}
}

func TestDiskTier(t *testing.T) {
	st := newStore(t)
	// Memory holds 4 x 1 KiB segments; the 3 KiB objects only fit on disk.
	var ids []media.ID
	for i := range 3 {
		ids = append(ids, put(t, st, media.LocStore, i, media.VariantLarge, "image/heic", payload(3000, byte(i))))
	}
	e := startEdge(t, "edge-a-1", edgecache.Config{CapacityBytes: 4096, DiskDir: t.TempDir()}, edgecache.Deps{Store: st})
	for round := range 2 {
		for i, id := range ids {
			resp, body := get(t, e.url+path(id, media.VariantLarge), nil)
			if resp.StatusCode != 200 || string(body) != string(payload(3000, byte(i))) {
				t.Fatalf("round %d object %d: status %d", round, i, resp.StatusCode)
			}
		}
	}
	if n := st.gets.Load(); n != 3 {
		t.Fatalf("%d origin reads, want 3 (second round from disk)", n)
	}
}

func TestFailedPeerIsSkippedForBackoff(t *testing.T) {
	st := newStore(t)
	var ids []media.ID
	for i := range 3 {
		ids = append(ids, put(t, st, media.LocStore, i, media.VariantThumb, "image/heic", payload(500, byte(i))))
	}
	var peerCalls atomic.Int64
	peer := &fakeEdge{get: func(*willowv1.GetRequest, willowv1.EdgeCache_GetServer) error {
		peerCalls.Add(1)
		return status.Error(codes.Unavailable, "owner is sick")
	}}
	addr := serveGRPC(t, func(s *grpc.Server) { willowv1.RegisterEdgeCacheServer(s, peer) })
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := startEdge(t, "edge-a-2", edgecache.Config{Hash: zeroHash, PeerBackoff: time.Minute}, edgecache.Deps{Store: st, Now: clock})
	e.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-1", Addr: addr}})
	for i, want := range []int64{1, 1, 2} {
		if i == 2 {
			mu.Lock()
			now = now.Add(time.Minute)
			mu.Unlock()
		}
		if resp, _ := get(t, e.url+path(ids[i], media.VariantThumb), nil); resp.StatusCode != 200 {
			t.Fatalf("object %d: status %d", i, resp.StatusCode)
		}
		if got := peerCalls.Load(); got != want {
			t.Fatalf("after object %d: %d calls to the failed owner, want %d", i, got, want)
		}
	}
}

func TestPool2FrontDown(t *testing.T) {
	for _, tc := range []struct {
		retries string
		code    int
	}{
		{"on", 200},
		{"off", 503},
	} {
		t.Run("retries="+tc.retries, func(t *testing.T) {
			st := newStore(t)
			id := media.ID{Loc: media.LocPool2, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "p2")}
			if err := st.Put(context.Background(), media.RawKey(id.Key), bytes.NewReader([]byte("raw")), 3, "image/jpeg"); err != nil {
				t.Fatal(err)
			}
			r := &fakeRouter{routes: map[string][]*willowv1.Endpoint{"upload": {{NodeId: "upload-a-1", Addr: deadAddr(t), Region: "a"}}}}
			e := startEdge(t, "edge-a-1", edgecache.Config{OriginTimeout: 2 * time.Second}, edgecache.Deps{Store: st, Router: r})
			e.node.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"retries": tc.retries}})
			resp, body := get(t, e.url+path(id, media.VariantRaw), nil)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.code, body)
			}
		})
	}
}

// A pool-2 item not drained yet whose front is down (not listed by the
// master any more, or listed and refusing connections) is unavailable,
// not missing: HTTP 503 and gRPC UNAVAILABLE origin, with retries on or
// off. Once its front answers NOT_FOUND (drained) and the store does not
// have it, it is 404. Unsigned reads of a public business (whose business
// the edge asks the front) answer the same.
func TestPool2FrontDownNotInStore(t *testing.T) {
	id := media.ID{Loc: media.LocPool2, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "p2-down")}
	drained := serveGRPC(t, func(s *grpc.Server) {
		willowv1.RegisterUploadServer(s, &fakeUpload{readPool: func(*willowv1.ReadPoolRequest, willowv1.Upload_ReadPoolServer) error {
			return rpcstatus.New(codes.NotFound, rpcstatus.ReasonNotFound, "not in pool 2")
		}})
	})
	for _, tc := range []struct {
		name    string
		routes  map[string][]*willowv1.Endpoint
		http    int
		code    codes.Code
		reason  string
		retries string
	}{
		{"not listed", nil, 503, codes.Unavailable, edgecache.ReasonOrigin, "on"},
		{"not listed, retries off", nil, 503, codes.Unavailable, edgecache.ReasonOrigin, "off"},
		{"listed, dead", map[string][]*willowv1.Endpoint{"upload": {{NodeId: "upload-a-1", Addr: deadAddr(t), Region: "a"}}},
			503, codes.Unavailable, edgecache.ReasonOrigin, "on"},
		{"listed, drained", map[string][]*willowv1.Endpoint{"upload": {{NodeId: "upload-a-1", Addr: drained, Region: "a"}}},
			404, codes.NotFound, rpcstatus.ReasonNotFound, "on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t)
			e := startEdge(t, "edge-a-1", edgecache.Config{OriginTimeout: 2 * time.Second},
				edgecache.Deps{Store: st, Router: &fakeRouter{routes: tc.routes}})
			e.node.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"retries": tc.retries}})
			for _, v := range []string{media.VariantRaw, media.VariantThumb} {
				resp, body := get(t, e.url+path(id, v), nil)
				if resp.StatusCode != tc.http || !strings.Contains(string(body), tc.reason) {
					t.Errorf("HTTP %s: %d %s, want %d %s", v, resp.StatusCode, body, tc.http, tc.reason)
				}
			}
			conn, err := node.Dial(e.node.Addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stream, err := willowv1.NewEdgeCacheClient(conn).Get(context.Background(), &willowv1.GetRequest{MediaId: id.String(), Variant: "raw"})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != tc.code || rpcstatus.Reason(err) != tc.reason {
				t.Errorf("gRPC: %v (reason %q), want %v %s", err, rpcstatus.Reason(err), tc.code, tc.reason)
			}
		})
	}
	// Unsigned request of a URL-keyed edge: the business is asked of the
	// front, which is down.
	st := newStore(t)
	e := startEdge(t, "edge-a-2", edgecache.Config{OriginTimeout: 2 * time.Second,
		URLKeys: []urlsign.Key{{ID: "k1", Secret: strings.Repeat("1", 32)}}, PublicBusinesses: []string{"avatar"}},
		edgecache.Deps{Store: st, Router: &fakeRouter{}})
	if resp, body := get(t, e.url+path(id, media.VariantRaw), nil); resp.StatusCode != 503 || !strings.Contains(string(body), edgecache.ReasonOrigin) {
		t.Errorf("unsigned, business unknown while its front is down: %d %s, want 503 origin", resp.StatusCode, body)
	}
}

func TestMetrics(t *testing.T) {
	st := newStore(t)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", payload(1000, 1))
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	for range 3 {
		get(t, e.url+path(id, media.VariantThumb), nil)
	}
	resp, body := get(t, "http://"+e.node.AdminAddr()+"/metrics", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	for _, want := range []string{
		`willow_edgecache_hits_total{tier="origin"} 1`,
		`willow_edgecache_hits_total{tier="memory"} 2`,
		`willow_edgecache_bytes_served_total{proto="http"} 3000`,
		`willow_edgecache_origin_fetches_total{result="ok",source="store"} 1`,
		`willow_edgecache_ring_members 1`,
	} {
		if !contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestContentTypeSniffed: the bytes decide, never the stored (client's)
// content type.
func TestContentTypeSniffed(t *testing.T) {
	st := newStore(t)
	heic := append([]byte{0, 0, 0, 24}, []byte("ftypheic\x00\x00\x00\x00mif1heic")...)
	jpeg := append([]byte{0xff, 0xd8, 0xff, 0xe0}, payload(100, 1)...)
	for i, tc := range []struct {
		stored string
		data   []byte
		want   string
	}{
		{"application/octet-stream", heic, "image/heic"},
		{"application/octet-stream", jpeg, "image/jpeg"},
		{"", jpeg, "image/jpeg"},
		{"video/mp4", jpeg, "image/jpeg"},
		{"application/octet-stream", []byte("plain"), "application/octet-stream"},
		{"text/html", []byte("<html><script>alert(1)</script>"), "application/octet-stream"},
		{"image/jpeg", []byte("<svg onload=alert(1)>"), "application/octet-stream"},
	} {
		t.Run(fmt.Sprintf("%d %s", i, tc.want), func(t *testing.T) {
			id := put(t, st, media.LocStore, i, media.VariantRaw, tc.stored, tc.data)
			e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
			resp, _ := get(t, e.url+path(id, media.VariantRaw), nil)
			if got := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || got != tc.want {
				t.Fatalf("status %d, Content-Type %q, want %q", resp.StatusCode, got, tc.want)
			}
		})
	}
}
