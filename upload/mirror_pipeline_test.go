package upload_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"willow/media"
	willowv1 "willow/proto/willow/v1"

	"willow/store"
	"willow/store/fs"
	"willow/upload"
)

// stuckParts is a store whose writes of mirrored parts hang until their
// context ends: a mirror that ran on the receive loop would hold every
// upload up for MirrorTimeout.
type stuckParts struct {
	store.Store
	started atomic.Int64
}

func (s *stuckParts) Put(ctx context.Context, key string, r io.Reader, size int64, ct string) error {
	if strings.Contains(key, "/part-") {
		s.started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Put(ctx, key, r, size, ct)
}

func (s *stuckParts) AdoptFile(ctx context.Context, key, path string, size int64, ct string) error {
	return s.Store.(store.FileAdopter).AdoptFile(ctx, key, path, size, ct)
}

// TestMirrorOffTheReceiveLoop: the copies of staged ranges to the store
// run beside the receive loop, and a commit does not wait for one still
// running; the bytes are still acknowledged only once durable (the raw is
// in the store, whole). Inside one request a copy waits for
// MirrorInterval.
func TestMirrorOffTheReceiveLoop(t *testing.T) {
	fsSt, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &stuckParts{Store: fsSt}
	const mirrorTimeout = 2 * time.Minute
	// A copy at every SyncEvery point (MirrorInterval < 0).
	f := newFront(t, frontOpts{store: st, instant: true,
		cfg: upload.Config{SyncEvery: 64 << 10, MirrorTimeout: mirrorTimeout, MirrorInterval: -1}})
	h := httpFront(t, f, upload.HTTPConfig{})
	data := bytes.Repeat(photo(t), 4) // a bit over 1 MiB: several syncs
	limit := mirrorTimeout / 4        // far below a stuck mirror, far above the work

	t.Run("tus", func(t *testing.T) {
		// The body arrives in two parts; the second is sent only once a
		// copy of a range of the first hangs in the store.
		pr, pw := io.Pipe()
		req, err := http.NewRequest("POST", h.URL(), pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(data))
		for k, v := range map[string]string{"Tus-Resumable": "1.0.0", "Authorization": "Bearer " + tok(t, "u-pipe", "moments"),
			"Upload-Length": strconv.Itoa(len(data)), "Content-Type": "application/offset+octet-stream",
			"Upload-Metadata": md("filetype", "image/jpeg", "upload_id", "pipe-tus", "sha256", sum(data))} {
			req.Header.Set(k, v)
		}
		go func() {
			half := len(data) / 2
			if _, err := pw.Write(data[:half]); err != nil {
				return
			}
			for st.started.Load() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			_, _ = pw.Write(data[half:])
			pw.Close()
		}()
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get(upload.HeaderMediaID) == "" {
			t.Fatalf("create with the whole body: %d %v", resp.StatusCode, resp.Header)
		}
		if took := time.Since(start); took > limit {
			t.Fatalf("the upload took %v: it waited for the stuck mirror", took)
		}
		checkRaw(t, f, resp.Header.Get(upload.HeaderMediaID), data)
	})
	t.Run("grpc", func(t *testing.T) {
		before := st.started.Load()
		start := time.Now()
		ctx := ctxT(t)
		if _, err := f.begin(ctx, "pipe-grpc", "u-pipe", data); err != nil {
			t.Fatal(err)
		}
		// Every chunk in one stream; Commit after it.
		if off, err := f.send(ctx, "pipe-grpc", data, 0, 64<<10); err != nil || off != int64(len(data)) {
			t.Fatalf("send: %d, %v", off, err)
		}
		r, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "pipe-grpc", User: "u-pipe"})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > limit {
			t.Fatalf("the upload took %v: it waited for the stuck mirror", took)
		}
		checkRaw(t, f, r.GetMediaId(), data)
		t.Logf("%d range copies started", st.started.Load()-before)
	})
	t.Run("interval", func(t *testing.T) {
		// Inside one request, the first SyncEvery point copies (the
		// upload is then resumable elsewhere even if its client stalls),
		// and no other before MirrorInterval has passed.
		g := newFront(t, frontOpts{store: st, instant: true,
			cfg: upload.Config{SyncEvery: 64 << 10, MirrorTimeout: mirrorTimeout, MirrorInterval: time.Hour}})
		hg := httpFront(t, g, upload.HTTPConfig{})
		before := st.started.Load()
		resp := do(t, "POST", hg.URL(), map[string]string{"Tus-Resumable": "1.0.0", "Authorization": "Bearer " + tok(t, "u-pipe", "moments"),
			"Upload-Length": strconv.Itoa(len(data)), "Content-Type": "application/offset+octet-stream",
			"Upload-Metadata": md("filetype", "image/jpeg", "upload_id", "pipe-interval", "sha256", sum(data))}, data)
		if resp.StatusCode != 201 || resp.Header.Get(upload.HeaderMediaID) == "" {
			t.Fatalf("create with the whole body: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
		}
		if n := st.started.Load() - before; n != 1 {
			t.Fatalf("%d range copies started inside one request, want the first point's only before MirrorInterval", n)
		}
		checkRaw(t, g, resp.Header.Get(upload.HeaderMediaID), data)
	})
}

// checkRaw fails unless media id's raw in f's store is data.
func checkRaw(t *testing.T, f *front, id string, data []byte) {
	t.Helper()
	mid, err := media.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	if got := storeBytes(t, f.store, media.RawKey(mid.Key)); !bytes.Equal(got, data) {
		t.Fatalf("raw of %s: %d bytes, want the %d uploaded", id, len(got), len(data))
	}
}
