package upload_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
	"willow/store/fs"
	"willow/upload"
)

// echoUpload is the baseline: a bare gRPC client stream of the same
// chunks, read and dropped.
type echoUpload struct {
	willowv1.UnimplementedUploadServer
}

func (echoUpload) Chunks(s willowv1.Upload_ChunksServer) error {
	var n int64
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&willowv1.ChunksResponse{Offset: n})
		}
		if err != nil {
			return err
		}
		n += int64(len(c.GetData()))
	}
}

var benchSeq atomic.Int64

// discardStore drops every Put and finds nothing: it separates the front's
// own cost from the store backend's.
type discardStore struct{}

func (discardStore) Put(_ context.Context, _ string, r io.Reader, _ int64, _ string) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
func (discardStore) Get(context.Context, string) (io.ReadCloser, store.Info, error) {
	return nil, store.Info{}, store.ErrNotFound
}
func (discardStore) Stat(context.Context, string) (store.Info, error) {
	return store.Info{}, store.ErrNotFound
}
func (discardStore) Delete(context.Context, string) error { return nil }

// BenchmarkUpload compares Begin+Chunks+Commit through the front (fs store,
// fake instant compress) with a bare client stream of the same bytes, on
// loopback. "front" waits in Commit for the first compress attempt (the
// default CommitWait); "front-async" acknowledges without waiting.
// WILLOW_BENCH_DIR puts the staging dirs and the store there (e.g.
// /dev/shm for tmpfs); default the benchmark's temp dir.
func BenchmarkUpload(b *testing.B) {
	en, err := node.New(node.Config{ID: "echo-1", Role: "upload", Region: "a"})
	if err != nil {
		b.Fatal(err)
	}
	willowv1.RegisterUploadServer(en.Server(), echoUpload{})
	if err := en.Guard().Declare(upload.Methods()); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go en.Run(ctx)
	econn, err := node.Dial(en.Addr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer econn.Close()
	echo := willowv1.NewUploadClient(econn)

	dir := os.Getenv("WILLOW_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		dir, err = os.MkdirTemp(dir, "willow-bench-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	st, err := fs.New(dir + "/store")
	if err != nil {
		b.Fatal(err)
	}
	fronts := []struct {
		name string
		f    *front
	}{
		{"front", newFrontB(b, frontOpts{store: st, staging: dir + "/staging", instant: true})},
		{"front-async", newFrontB(b, frontOpts{store: st, staging: dir + "/staging-async", cfg: upload.Config{CommitWait: -1}, instant: true})},
		{"front-nullstore", newFrontB(b, frontOpts{store: discardStore{}, staging: dir + "/staging-null", instant: true})},
	}

	for _, size := range []int{1 << 20, 5 << 20} {
		data := make([]byte, size)
		rand.Read(data)
		b.Run(fmt.Sprintf("bare/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				s, err := echo.Chunks(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += 1 << 20 {
					if err := s.Send(&willowv1.Chunk{UploadId: "x", Offset: int64(off), Data: data[off:min(off+1<<20, size)]}); err != nil {
						b.Fatal(err)
					}
				}
				if r, err := s.CloseAndRecv(); err != nil || r.GetOffset() != int64(size) {
					b.Fatal(err)
				}
			}
		})
		for _, fr := range fronts {
			b.Run(fmt.Sprintf("%s/%dMiB", fr.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					i := benchSeq.Add(1)
					id := fmt.Sprintf("bench-%d", i)
					data[0], data[1], data[2] = byte(i), byte(i>>8), byte(i>>16) // a new upload each time
					// The client's SHA-256 of its file is not the front's cost.
					b.StopTimer()
					req := &willowv1.BeginRequest{UploadId: id, Token: tok(b, "bencher", "moments"), Business: "moments",
						User: "bencher", Kind: willowv1.Kind_KIND_IMAGE, Size: int64(size), Sha256: sum(data)}
					b.StartTimer()
					if _, err := fr.f.client.Begin(ctx, req); err != nil {
						b.Fatal(err)
					}
					if _, err := fr.f.send(ctx, id, data, 0, 1<<20); err != nil {
						b.Fatal(err)
					}
					if _, err := fr.f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: "bencher"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
