package upload_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	willowv1 "willow/proto/willow/v1"
	"willow/upload"
)

// TestTransientRetriesCapped: compress answering INTERNAL is retried with
// backoff MaxInternalAttempts times, then the media is failed
// (retries_exhausted) and nothing retries it by itself; an outage
// (UNAVAILABLE) is retried past that count and ends ready once compress
// is back; an outage longer than MaxRetryAge ends failed too.
func TestTransientRetriesCapped(t *testing.T) {
	t.Run("internal", func(t *testing.T) {
		f := newFront(t, frontOpts{cfg: upload.Config{MaxInternalAttempts: 3, CommitWait: -1}})
		ctx := ctxT(t)
		f.compress.setFail(status.Error(codes.Internal, "decoder crashed"))
		r := f.mustUpload(ctx, "int-1", "u1", photo(t))
		var md *willowv1.Media
		eventually(t, "the media failed", func() bool {
			var err error
			md, err = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && md.GetState() == upload.StateFailed
		})
		if md.GetReason() != upload.ReasonRetriesExhausted {
			t.Fatalf("failed with reason %q (%s), want %s", md.GetReason(), md.GetError(), upload.ReasonRetriesExhausted)
		}
		calls := f.compress.calls.Load()
		// The first attempt at commit, then the journal's three.
		if calls < 3 || calls > 4 {
			t.Fatalf("%d compress calls, want the cap (3) plus the first attempt", calls)
		}
		time.Sleep(500 * time.Millisecond) // many RetryMax periods
		if n := f.compress.calls.Load(); n != calls {
			t.Fatalf("compress called %d more times after the job failed", n-calls)
		}
	})
	t.Run("outage", func(t *testing.T) {
		f := newFront(t, frontOpts{cfg: upload.Config{MaxInternalAttempts: 2, CommitWait: -1}})
		ctx := ctxT(t)
		f.compress.setFail(status.Error(codes.Unavailable, "compress down"))
		r := f.mustUpload(ctx, "out-1", "u1", photo(t))
		eventually(t, "several retries", func() bool { return f.compress.calls.Load() >= 5 })
		f.compress.setFail(nil)
		eventually(t, "ready after the outage", func() bool {
			md, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && md.GetState() == upload.StateReady
		})
	})
	t.Run("age", func(t *testing.T) {
		f := newFront(t, frontOpts{cfg: upload.Config{MaxRetryAge: 400 * time.Millisecond, CommitWait: -1}})
		ctx := ctxT(t)
		f.compress.setFail(status.Error(codes.Unavailable, "compress down"))
		r := f.mustUpload(ctx, "age-1", "u1", photo(t))
		var md *willowv1.Media
		eventually(t, "the media failed after MaxRetryAge", func() bool {
			var err error
			md, err = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && md.GetState() == upload.StateFailed
		})
		if md.GetReason() != upload.ReasonRetriesExhausted {
			t.Fatalf("reason %q, want %s", md.GetReason(), upload.ReasonRetriesExhausted)
		}
	})
}
