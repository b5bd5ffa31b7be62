package upload_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"

	willowv1 "willow/proto/willow/v1"
	"willow/store/fs"
	"willow/upload"
)

// BenchmarkUploadMirror measures what the staging mirror (resume on any
// front, resume.go) costs the upload path: the same Begin+Chunks+Commit
// through a front with the mirror on (the default) and off, on the fs
// store, fake instant compress. "1stream" sends the file in one stream
// (its last range is never mirrored); "4streams" sends it in four, as a
// client on a flaky network would, so three ranges are mirrored as parts.
// WILLOW_BENCH_DIR puts staging and store there (e.g. /dev/shm).
func BenchmarkUploadMirror(b *testing.B) {
	dir := os.Getenv("WILLOW_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "willow-bench-"); err != nil {
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
		{"mirror", newFrontB(b, frontOpts{store: st, staging: dir + "/staging-m", cfg: upload.Config{CommitWait: -1}, instant: true})},
		{"nomirror", newFrontB(b, frontOpts{store: st, staging: dir + "/staging-n", cfg: upload.Config{CommitWait: -1, DisableStagingMirror: true}, instant: true})},
	}
	head := photo(b)
	ctx := context.Background()
	const size = 5 << 20
	data := make([]byte, size)
	rand.Read(data)
	copy(data, head[:min(len(head), 64<<10)])
	for _, streams := range []int{1, 4} {
		for _, fr := range fronts {
			b.Run(fmt.Sprintf("%dstreams/%s", streams, fr.name), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					i := benchSeq.Add(1)
					id := fmt.Sprintf("mbench-%d", i)
					data[size-3], data[size-2], data[size-1] = byte(i), byte(i>>8), byte(i>>16)
					b.StopTimer()
					s := sum(data)
					b.StartTimer()
					if _, err := fr.f.client.Begin(ctx, mbeginReq(b, id, s, size)); err != nil {
						b.Fatal(err)
					}
					for k := 0; k < streams; k++ {
						from, to := int64(k)*size/int64(streams), int64(k+1)*size/int64(streams)
						if _, err := fr.f.send(ctx, id, data[:to], from, 1<<20); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := fr.f.client.Commit(ctx, commitReqFor(id)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func mbeginReq(tb testing.TB, id, sha string, size int64) *willowv1.BeginRequest {
	return &willowv1.BeginRequest{UploadId: id, Token: tok(tb, "bencher", "moments"), Business: "moments",
		User: "bencher", Kind: willowv1.Kind_KIND_IMAGE, Size: size, Sha256: sha}
}

func commitReqFor(id string) *willowv1.CommitRequest {
	return &willowv1.CommitRequest{UploadId: id, User: "bencher"}
}
