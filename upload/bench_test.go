package upload_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// benchPhoto is size bytes that the front accepts as a JPEG: the head of a
// corpus photo (so the sniff and the header check pass), then random bytes.
func benchPhoto(b *testing.B, size int) []byte {
	head, err := os.ReadFile("../../shared/testdata/photos/Wine_by_Jakkub_Mede.jpg")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	copy(data, head[:min(len(head), 64<<10)])
	return data
}

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

	bare := func(data []byte) error {
		s, err := echo.Chunks(ctx)
		if err != nil {
			return err
		}
		for off := 0; off < len(data); off += 1 << 20 {
			if err := s.Send(&willowv1.Chunk{UploadId: "x", Offset: int64(off), Data: data[off:min(off+1<<20, len(data))]}); err != nil {
				return err
			}
		}
		r, err := s.CloseAndRecv()
		if err == nil && r.GetOffset() != int64(len(data)) {
			err = fmt.Errorf("echo got %d of %d bytes", r.GetOffset(), len(data))
		}
		return err
	}
	through := func(f *front) func([]byte) error {
		return func(data []byte) error {
			i := benchSeq.Add(1)
			id := fmt.Sprintf("bench-%d", i)
			size := len(data)
			data[size-3], data[size-2], data[size-1] = byte(i), byte(i>>8), byte(i>>16) // a new upload each time
			req := &willowv1.BeginRequest{UploadId: id, Token: tok(b, "bencher", "moments"), Business: "moments",
				User: "bencher", Kind: willowv1.Kind_KIND_IMAGE, Size: int64(size), Sha256: sum(data)}
			// The client's SHA-256 of its file is not the front's cost: the
			// timing starts at Begin.
			t0, c0 := time.Now(), cpuTime()
			if _, err := f.client.Begin(ctx, req); err != nil {
				return err
			}
			if _, err := f.send(ctx, id, data, 0, 1<<20); err != nil {
				return err
			}
			if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: "bencher"}); err != nil {
				return err
			}
			lastWall, lastCPU = time.Since(t0), cpuTime()-c0
			return nil
		}
	}
	subjects := []benchSubject{{name: "bare", run: bare}}
	for _, fr := range fronts {
		subjects = append(subjects, benchSubject{name: fr.name, run: through(fr.f), timed: true})
	}
	for _, size := range []int{1 << 20, 5 << 20} {
		data := benchPhoto(b, size)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			runAlternating(b, size, data, subjects)
		})
	}
}

// lastWall and lastCPU are what a timed subject measured of its last run
// (the front subjects time themselves from Begin, after the client's hash).
var lastWall, lastCPU time.Duration

type benchSubject struct {
	name string
	run  func([]byte) error
	// timed: run sets lastWall and lastCPU itself.
	timed bool
}

// runAlternating runs every subject once per round, b.N rounds, in an
// order that rotates each round, and reports per subject the median MB/s
// (wall clock) and the median process CPU per upload, and each one's
// ratio to the first subject (the baseline) in the same rounds. On a
// shared, loaded box the CPU ratio is the steadier of the two.
func runAlternating(b *testing.B, size int, data []byte, subjects []benchSubject) {
	wall := make([][]float64, len(subjects))
	cpu := make([][]float64, len(subjects))
	for r := 0; r < b.N; r++ {
		for k := range subjects {
			i := (k + r) % len(subjects)
			sj := subjects[i]
			t0, c0 := time.Now(), cpuTime()
			if err := sj.run(data); err != nil {
				b.Fatalf("%s: %v", sj.name, err)
			}
			w, c := time.Since(t0), cpuTime()-c0
			if sj.timed {
				w, c = lastWall, lastCPU
			}
			wall[i] = append(wall[i], w.Seconds())
			cpu[i] = append(cpu[i], c.Seconds())
		}
	}
	mb := float64(size) / 1e6
	bw, bc := median(wall[0]), median(cpu[0])
	for i, sj := range subjects {
		w, c := median(wall[i]), median(cpu[i])
		b.ReportMetric(mb/w, sj.name+"-MB/s")
		if i > 0 {
			b.ReportMetric(100*bw/w, sj.name+"-%wall")
			b.ReportMetric(100*bc/c, sj.name+"-%cpu")
		}
	}
	b.ReportMetric(0, "ns/op")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
