package upload_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/upload"
)

// TestStagingExpiry: an upload not committed within StagingTTL is removed
// by the staging GC, its disk reclaimed; a late chunk or Status gets
// NOT_FOUND upload_expired; beginning it again starts from zero.
func TestStagingExpiry(t *testing.T) {
	staging := t.TempDir()
	// The TTL leaves a loaded box time to begin and send half before the
	// upload may expire (300 ms failed once at load 6 on 2 cores).
	f := newFront(t, frontOpts{staging: staging, cfg: upload.Config{StagingTTL: time.Second, GCInterval: 50 * time.Millisecond, SyncEvery: 64 << 10}})
	ctx := ctxT(t)
	data := photo(t)
	if _, err := f.begin(ctx, "late-1", "mia", data); err != nil {
		t.Fatal(err)
	}
	half := int64(len(data) / 2)
	if off, err := f.send(ctx, "late-1", data[:half], 0, 64<<10); err != nil || off != half {
		t.Fatalf("send half: %d %v", off, err)
	}
	if f.srv.StagingBytes() != int64(len(data)) {
		t.Fatalf("staging bytes %d, want %d", f.srv.StagingBytes(), len(data))
	}
	up := filepath.Join(staging, "up")
	eventually(t, "the expired upload removed from disk", func() bool {
		ents, _ := os.ReadDir(up)
		return len(ents) == 0
	})
	if n := diskUse(t, up); n != 0 {
		t.Fatalf("staging dir still uses %d bytes", n)
	}
	if f.srv.StagingBytes() != 0 {
		t.Fatalf("staging bytes %d after expiry", f.srv.StagingBytes())
	}
	// A late chunk, with and without Chunk.user, and Status.
	for _, user := range []string{"", "mia"} {
		s, err := f.client.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Send(&willowv1.Chunk{UploadId: "late-1", Offset: half, Data: data[half:], User: user})
		_, err = s.CloseAndRecv()
		if status.Code(err) != codes.NotFound || rpcstatus.Reason(err) != upload.ReasonUploadExpired {
			t.Fatalf("late chunk (user %q): %v, want NOT_FOUND upload_expired", user, err)
		}
	}
	_, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "late-1", User: "mia"})
	if status.Code(err) != codes.NotFound || rpcstatus.Reason(err) != upload.ReasonUploadExpired {
		t.Fatalf("Status: %v, want NOT_FOUND upload_expired", err)
	}
	// Begun again, it starts over and completes.
	b, err := f.begin(ctx, "late-1", "mia", data)
	if err != nil || b.GetOffset() != 0 {
		t.Fatalf("begin again: %v %v", b, err)
	}
	if _, err := f.send(ctx, "late-1", data, 0, 256<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "late-1", User: "mia"}); err != nil {
		t.Fatal(err)
	}
}

// TestStagingBudget: over the per-front staging budget Begin answers
// RESOURCE_EXHAUSTED staging_full with a retry-after; a commit frees room;
// resuming a staged upload is never refused.
func TestStagingBudget(t *testing.T) {
	data := photo(t) // 525520 bytes
	f := newFront(t, frontOpts{cfg: upload.Config{StagingBudgetBytes: int64(len(data)) * 3 / 2}})
	ctx := ctxT(t)
	if _, err := f.begin(ctx, "b-1", "noa", data); err != nil {
		t.Fatal(err)
	}
	_, err := f.begin(ctx, "b-2", "noa", data)
	if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != upload.ReasonStagingFull || rpcstatus.RetryAfter(err) <= 0 {
		t.Fatalf("second Begin: %v (retry-after %v), want RESOURCE_EXHAUSTED staging_full with a retry-after", err, rpcstatus.RetryAfter(err))
	}
	if _, err := f.begin(ctx, "b-1", "noa", data); err != nil {
		t.Fatalf("resuming b-1 over the budget: %v", err)
	}
	if _, err := f.send(ctx, "b-1", data, 0, 256<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "b-1", User: "noa"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.begin(ctx, "b-2", "noa", data); err != nil {
		t.Fatalf("Begin after a commit freed the budget: %v", err)
	}
}
