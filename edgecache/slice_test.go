package edgecache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"willow/edgecache"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
)

const testSlice = 256 << 10

// putRawRecord writes a media record listing the raw's SHA-256, as the upload
// front does.
func putRawRecord(t *testing.T, st store.Store, id media.ID, raw []byte) {
	t.Helper()
	sum := sha256.Sum256(raw)
	rec := fmt.Sprintf(`{"id":%q,"kind":"video","size":%d,"sha256":%q,"state":"ready","variants":[]}`, id.String(), len(raw), hex.EncodeToString(sum[:]))
	if err := st.Put(context.Background(), media.RecordKey(id.Key), bytes.NewReader([]byte(rec)), int64(len(rec)), "application/json"); err != nil {
		t.Fatal(err)
	}
}

func wholeETag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// TestSlicedFill: an object larger than one slice is read from origin only
// in the slices a request covers, each once, and served whole, by range,
// conditionally and over gRPC with the ETag of its whole bytes.
func TestSlicedFill(t *testing.T) {
	st := newStore(t)
	data := payload(12*testSlice+1234, 5)
	id := put(t, st, media.LocStore, 1, media.VariantRaw, "video/mp4", data)
	putRawRecord(t, st, id, data)
	e := startEdge(t, "edge-a-1", edgecache.Config{SliceBytes: testSlice}, edgecache.Deps{Store: st})
	u := e.url + path(id, media.VariantRaw)
	recordBytes := func() int64 { // bytes of the record read (once, by the head fill)
		info, _ := st.Stat(context.Background(), media.RecordKey(id.Key))
		return info.Size
	}()

	// A cold Range of 1 KiB reads one slice (and the record for the ETag).
	resp, body := get(t, u, map[string]string{"Range": "bytes=0-1023"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[:1024]) {
		t.Fatalf("cold range: status %d, %d bytes", resp.StatusCode, len(body))
	}
	if got := resp.Header.Get("Content-Range"); got != fmt.Sprintf("bytes 0-1023/%d", len(data)) {
		t.Fatalf("Content-Range %q", got)
	}
	etag := resp.Header.Get("ETag")
	if etag != wholeETag(data) {
		t.Fatalf("ETag %s, want %s (the whole bytes' hash, from the record)", etag, wholeETag(data))
	}
	if resp.Header.Get("Last-Modified") == "" {
		t.Fatal("no Last-Modified")
	}
	if got := st.read.Load(); got != testSlice+recordBytes {
		t.Fatalf("cold 1 KiB range read %d bytes from origin, want one slice (%d) + record (%d)", got, testSlice, recordBytes)
	}

	// A range inside slice 5 reads that slice only.
	from := 5*testSlice + 100
	resp, body = get(t, u, map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", from, from+999)})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[from:from+1000]) {
		t.Fatalf("middle range: status %d", resp.StatusCode)
	}
	if got := st.read.Load(); got != 2*testSlice+recordBytes {
		t.Fatalf("after the middle range: %d bytes from origin, want two slices + record", got)
	}

	// The whole object: every slice read once in all.
	resp, body = get(t, u, nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, data) || resp.Header.Get("ETag") != etag {
		t.Fatalf("whole: status %d, %d of %d bytes", resp.StatusCode, len(body), len(data))
	}
	if got := st.read.Load(); got != int64(len(data))+recordBytes {
		t.Fatalf("after the whole object: %d bytes from origin, want %d", got, int64(len(data))+recordBytes)
	}
	before := st.gets.Load()
	if resp, body = get(t, u, nil); !bytes.Equal(body, data) {
		t.Fatalf("warm whole: %d bytes", len(body))
	}
	if resp, _ = get(t, u, map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: status %d", resp.StatusCode)
	}
	if resp, body = do(t, http.MethodHead, u, nil); resp.ContentLength != int64(len(data)) || len(body) != 0 {
		t.Fatalf("HEAD: Content-Length %d", resp.ContentLength)
	}
	if resp, _ = get(t, u, map[string]string{"Range": fmt.Sprintf("bytes=%d-", len(data)+10)}); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past the end: status %d", resp.StatusCode)
	}
	if got := st.gets.Load(); got != before {
		t.Fatalf("warm requests read origin %d times", got-before)
	}

	// gRPC, across slice boundaries.
	conn, err := node.Dial(e.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	off, n := int64(3*testSlice-10), int64(2*testSlice+20)
	got, first := grpcRead(t, willowv1.NewEdgeCacheClient(conn), &willowv1.GetRequest{MediaId: id.String(), Variant: "raw", Offset: off, Length: n})
	if !bytes.Equal(got, data[off:off+n]) || first.GetSize() != int64(len(data)) || first.GetEtag() != etag {
		t.Fatalf("gRPC range: %d bytes, size %d, etag %s", len(got), first.GetSize(), first.GetEtag())
	}
}

func grpcRead(t *testing.T, c willowv1.EdgeCacheClient, req *willowv1.GetRequest) ([]byte, *willowv1.DataChunk) {
	t.Helper()
	st, err := c.Get(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var first *willowv1.DataChunk
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("gRPC Get: %v", err)
		}
		if first == nil {
			first = m
		}
		buf.Write(m.GetData())
	}
	return buf.Bytes(), first
}

// TestSlicedThroughOwner: a non-owner fills slices from the owner peer;
// origin sees every slice once across the OC.
func TestSlicedThroughOwner(t *testing.T) {
	st := newStore(t)
	data := payload(6*testSlice+77, 6)
	id := put(t, st, media.LocStore, 1, media.VariantVideo, "video/mp4", data)
	cfg := edgecache.Config{Hash: zeroHash, SliceBytes: testSlice}
	owner := startEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	other := startEdge(t, "edge-a-2", cfg, edgecache.Deps{Store: st})
	owner.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-2", Addr: other.node.Addr()}})
	other.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-1", Addr: owner.node.Addr()}})

	from := 4*testSlice - 5
	resp, body := get(t, other.url+path(id, media.VariantVideo), map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", from, from+9)})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[from:from+10]) {
		t.Fatalf("range via the non-owner: status %d", resp.StatusCode)
	}
	// Slice 0 (the head fill) and slices 3 and 4.
	if got := st.read.Load(); got != 3*testSlice {
		t.Fatalf("origin read %d bytes for a range over two slices, want 3 slices' worth", got)
	}
	etag := resp.Header.Get("ETag")
	for i, e := range []*edge{other, owner, other} {
		resp, body := get(t, e.url+path(id, media.VariantVideo), nil)
		if resp.StatusCode != 200 || !bytes.Equal(body, data) || resp.Header.Get("ETag") != etag || resp.Header.Get("Last-Modified") == "" {
			t.Fatalf("request %d: status %d, %d bytes, ETag %s", i, resp.StatusCode, len(body), resp.Header.Get("ETag"))
		}
	}
	if got := st.read.Load(); got != int64(len(data)) {
		t.Fatalf("origin read %d bytes across the OC, want %d (each slice once)", got, len(data))
	}
}

// TestSlicedFromPool2: a large pool-2 item is filled slice by slice with
// ranged ReadPool calls, with the ETag of its whole bytes (the front sends
// the content SHA-256), the same after it drained to the store.
func TestSlicedFromPool2(t *testing.T) {
	st := newStore(t)
	data := payload(5*testSlice+3, 8)
	sum := sha256.Sum256(data)
	id := media.ID{Loc: media.LocPool2, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "p2big")}
	var mu sync.Mutex // guards asked
	var asked []string
	up := &fakeUpload{readPool: func(req *willowv1.ReadPoolRequest, s willowv1.Upload_ReadPoolServer) error {
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%d+%d", req.GetOffset(), req.GetLength()))
		mu.Unlock()
		off, n := req.GetOffset(), req.GetLength()
		end := int64(len(data))
		if n > 0 {
			end = min(end, off+n)
		}
		body := data[min(off, end):end]
		first := &willowv1.DataChunk{Size: int64(len(data)), ContentType: "video/mp4", Etag: hex.EncodeToString(sum[:])}
		for first != nil || len(body) > 0 {
			m := first
			if m == nil {
				m = &willowv1.DataChunk{}
			}
			first = nil
			k := min(len(body), 100<<10)
			m.Data, body = body[:k], body[k:]
			if err := s.Send(m); err != nil {
				return err
			}
		}
		return nil
	}}
	addr := serveGRPC(t, func(s *grpc.Server) { willowv1.RegisterUploadServer(s, up) })
	r := &fakeRouter{routes: map[string][]*willowv1.Endpoint{"upload": {{NodeId: "upload-a-1", Addr: addr, Region: "a"}}}}
	e := startEdge(t, "edge-a-1", edgecache.Config{SliceBytes: testSlice}, edgecache.Deps{Store: st, Router: r})

	from := int64(3*testSlice + 10)
	resp, body := get(t, e.url+path(id, media.VariantRaw), map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", from, from+99)})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[from:from+100]) {
		t.Fatalf("range: status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("ETag"); got != wholeETag(data) {
		t.Fatalf("ETag %s, want %s", got, wholeETag(data))
	}
	mu.Lock()
	got := strings.Join(asked, " ")
	mu.Unlock()
	if want := fmt.Sprintf("0+%d %d+%d", testSlice, 3*testSlice, testSlice); got != want {
		t.Fatalf("ReadPool asked for %q, want %q (the head slice and the slice of the range)", got, want)
	}
	resp, body = get(t, e.url+path(id, media.VariantRaw), nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("whole: status %d, %d bytes", resp.StatusCode, len(body))
	}
	if st.gets.Load() != 0 {
		t.Fatalf("%d store reads for a pool-2 item", st.gets.Load())
	}
}
