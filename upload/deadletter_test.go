package upload_test

import (
	"bytes"
	"context"
	"image"
	"image/gif"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/compress"
	"willow/limits"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/upload"
)

// put runs Begin, Chunks and Commit for one upload of a kind and business.
func (f *front) put(ctx context.Context, id string, kind willowv1.Kind, business string, data []byte) (*willowv1.CommitResponse, error) {
	b, err := f.client.Begin(ctx, &willowv1.BeginRequest{UploadId: id, Token: tok(f.t, "u1", business), Business: business,
		User: "u1", Kind: kind, Size: int64(len(data)), Sha256: sum(data)})
	if err != nil {
		return nil, err
	}
	if !b.GetCommitted() {
		if _, err := f.send(ctx, id, data, b.GetOffset(), 256<<10); err != nil {
			return nil, err
		}
	}
	return f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: "u1"})
}

// compressTasks counts the tasks the real compress worker ran.
func (f *front) compressTasks() float64 {
	f.t.Helper()
	mfs, err := f.compressNode.Registry().Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "willow_compress_tasks_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// withPixels returns a JPEG whose SOF header claims w x h.
func withPixels(t *testing.T, jpg []byte, w, h int) []byte {
	b := append([]byte(nil), jpg...)
	for i := 2; i+9 < len(b); {
		if b[i] != 0xFF {
			t.Fatal("no SOF marker")
		}
		m, n := b[i+1], int(b[i+2])<<8|int(b[i+3])
		if m >= 0xC0 && m <= 0xC3 {
			b[i+5], b[i+6], b[i+7], b[i+8] = byte(h>>8), byte(h), byte(w>>8), byte(w)
			return b
		}
		i += 2 + n
	}
	t.Fatal("no SOF marker")
	return nil
}

func readFile(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPermanentFailuresEndFailed uploads inputs compress can never make
// variants of, through the real compress worker: each is either refused
// before the acknowledgement or acknowledged and then ends failed within
// seconds with its reason — in the Commit reply, in GetMedia — and is
// never retried by itself.
func TestPermanentFailuresEndFailed(t *testing.T) {
	jpg := photo(t)
	corrupt := append([]byte(nil), jpg...)
	for i := len(corrupt) / 2; i < len(corrupt)-2; i += 97 {
		corrupt[i] ^= 0x5a
	}
	var gb bytes.Buffer
	if err := gif.Encode(&gb, image.NewRGBA(image.Rect(0, 0, 16, 16)), nil); err != nil {
		t.Fatal(err)
	}
	webp := append([]byte("RIFF\x40\x00\x00\x00WEBPVP8L\x34\x00\x00\x00\x2f"), bytes.Repeat([]byte{0x11}, 60)...)
	random := make([]byte, 200<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.UintN(256))
	}
	image45 := withPixels(t, jpg, 7800, 5800) // 45.2 MP
	// A HEIC damaged inside its HEVC data, every box intact (stock
	// libheif conceals it: compress/heifstrict_test.go).
	badHEIC := readFile(t, "../compress/testdata/dragonfly-640.heic")
	if i := bytes.Index(badHEIC, []byte("mdat")); i > 0 {
		o := i + 4 + (len(badHEIC)-i-4)/2
		for k := o; k < o+32; k++ {
			badHEIC[k] ^= 0x5a
		}
	}
	tests := []struct {
		name   string
		kind   willowv1.Kind
		data   []byte
		front  limits.Limits // the front's limits (zero: the shared defaults)
		refuse string        // refused before the acknowledgement with this reason
		reason string        // else: ends failed with this reason
	}{
		{"45 MP photo, one shared limit", willowv1.Kind_KIND_IMAGE, image45, limits.Limits{}, limits.ReasonPixelBomb, ""},
		{"45 MP photo, front configured apart (50 MP)", willowv1.Kind_KIND_IMAGE, image45, limits.Limits{MaxPixels: 50_000_000}, "", limits.ReasonPixelBomb},
		{"corrupt after the header", willowv1.Kind_KIND_IMAGE, corrupt, limits.Limits{}, "", compress.ReasonCorruptMedia},
		{"HEIC corrupt inside the HEVC data", willowv1.Kind_KIND_IMAGE, badHEIC, limits.Limits{}, "", compress.ReasonCorruptMedia},
		{"truncated JPEG", willowv1.Kind_KIND_IMAGE, readFile(t, "../../shared/testdata/bad/truncated.jpg"), limits.Limits{}, "", compress.ReasonCorruptMedia},
		{"text named .jpg", willowv1.Kind_KIND_IMAGE, []byte("<html>not a photo</html>\n"), limits.Limits{}, "", compress.ReasonUnsupportedMedia},
		{"GIF", willowv1.Kind_KIND_IMAGE, gb.Bytes(), limits.Limits{}, "", compress.ReasonUnsupportedMedia},
		{"WebP", willowv1.Kind_KIND_IMAGE, webp, limits.Limits{}, "", compress.ReasonUnsupportedMedia},
		{"random bytes as .mp4", willowv1.Kind_KIND_VIDEO, random, limits.Limits{}, "", compress.ReasonCorruptMedia},
		{"audio-only .mp4", willowv1.Kind_KIND_VIDEO, readFile(t, "testdata/audio-only.mp4"), limits.Limits{}, "", compress.ReasonCorruptMedia},
		{"10-minute video for moments", willowv1.Kind_KIND_VIDEO, readFile(t, "testdata/black-600s.mp4"), limits.Limits{}, limits.ReasonTooLong, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Short retry delays: a job that were retried would be
			// retried many times during the wait below.
			f := newFront(t, frontOpts{real: true, cfg: upload.Config{Limits: tc.front}})
			ctx := ctxT(t)
			start := time.Now()
			cr, err := f.put(ctx, "bad-1", tc.kind, "moments", tc.data)
			if tc.refuse != "" {
				if status.Code(err) != codes.InvalidArgument || rpcstatus.Reason(err) != tc.refuse {
					t.Fatalf("upload: %v, want INVALID_ARGUMENT %s", err, tc.refuse)
				}
				return
			}
			if err != nil {
				// Content sniffing may refuse some of these up front.
				if status.Code(err) == codes.InvalidArgument {
					t.Logf("refused up front: %v", err)
					return
				}
				t.Fatalf("upload: %v", err)
			}
			if cr.GetState() != upload.StateFailed || cr.GetReason() != tc.reason {
				t.Fatalf("Commit reply state %q reason %q (%s), want failed %s", cr.GetState(), cr.GetReason(), cr.GetError(), tc.reason)
			}
			md, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()})
			if err != nil {
				t.Fatal(err)
			}
			if md.GetState() != upload.StateFailed || md.GetReason() != tc.reason || md.GetError() == "" {
				t.Fatalf("GetMedia: state %q reason %q error %q", md.GetState(), md.GetReason(), md.GetError())
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("failed after %v, want within seconds", d)
			}
			tasks := f.compressTasks()
			time.Sleep(time.Second) // 5x RetryMax of this front
			if n := f.compressTasks(); n != tasks {
				t.Fatalf("compress ran %v more tasks for a failed item: retried by itself", n-tasks)
			}
			md, _ = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()})
			if md.GetState() != upload.StateFailed || md.GetAttempts() != 1 {
				t.Fatalf("after the wait: state %q attempts %d", md.GetState(), md.GetAttempts())
			}
		})
	}
}

// TestRetryMedia: an operator's retry takes a failed item back through
// compress, and only a failed item.
func TestRetryMedia(t *testing.T) {
	f := newFront(t, frontOpts{})
	ctx := ctxT(t)
	f.compress.setFail(rpcstatus.New(codes.InvalidArgument, compress.ReasonCorruptMedia, "test: corrupt"))
	cr := f.mustUpload(ctx, "r-1", "u1", photo(t))
	if cr.GetState() != upload.StateFailed || cr.GetReason() != compress.ReasonCorruptMedia {
		t.Fatalf("commit: state %q reason %q", cr.GetState(), cr.GetReason())
	}
	calls := f.compress.calls.Load()
	time.Sleep(500 * time.Millisecond)
	if n := f.compress.calls.Load(); n != calls {
		t.Fatalf("a failed item was retried by itself (%d more calls)", n-calls)
	}
	f.compress.setFail(nil)
	md, err := f.client.RetryMedia(ctx, &willowv1.RetryMediaRequest{MediaId: cr.GetMediaId()})
	if err != nil || md.GetState() != upload.StateProcessing {
		t.Fatalf("RetryMedia: %v %v", md, err)
	}
	eventually(t, "ready after the retry", func() bool {
		md, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()})
		return err == nil && md.GetState() == upload.StateReady && len(md.GetVariants()) == 3 && md.GetReason() == ""
	})
	_, err = f.client.RetryMedia(ctx, &willowv1.RetryMediaRequest{MediaId: cr.GetMediaId()})
	if status.Code(err) != codes.FailedPrecondition || rpcstatus.Reason(err) != upload.ReasonNotFailed {
		t.Fatalf("RetryMedia of a ready item: %v, want FAILED_PRECONDITION not_failed", err)
	}
}

// TestCompressOutageEndsDone: while compress is down (UNAVAILABLE) jobs
// are retried with backoff, never failed; once it is back every job is
// done.
func TestCompressOutageEndsDone(t *testing.T) {
	f := newFront(t, frontOpts{cfg: upload.Config{CommitWait: -1}})
	ctx := ctxT(t)
	f.compress.setFail(status.Error(codes.Unavailable, "compress down (test)"))
	data := photo(t)
	var ids []string
	for i := range 8 {
		d := append(append([]byte(nil), data...), byte(i))
		ids = append(ids, f.mustUpload(ctx, "o-"+string(rune('a'+i)), "u1", d).GetMediaId())
	}
	time.Sleep(700 * time.Millisecond)
	for _, id := range ids {
		md, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		if err != nil || md.GetState() != upload.StateProcessing {
			t.Fatalf("during the outage %s: %v %v, want processing", id, md.GetState(), err)
		}
	}
	f.compress.setFail(nil)
	eventually(t, "every job done after the outage", func() bool {
		for _, id := range ids {
			md, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
			if err != nil || md.GetState() != upload.StateReady {
				return false
			}
		}
		return true
	})
}
