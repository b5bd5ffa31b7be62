package upload_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/upload"
)

// TestRetireMigratesPools fills pool 2 (and pool 1), retires the front and
// checks that every item is in the store with the same bytes, readable,
// recorded once, that new uploads are refused meanwhile, and that
// RetireKeepPool1 leaves pool 1 alone.
func TestRetireMigratesPools(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_pool1=%v", keep), func(t *testing.T) {
			f := newFront(t, frontOpts{pools: true, cfg: upload.Config{RetireKeepPool1: keep}})
			ctx := ctxT(t)
			data := photo(t)
			f.knobs(map[string]string{"pool2": "force", "pool1_drain_per_s": "0"})
			var p2 []string
			for i := range 5 {
				p2 = append(p2, f.mustUpload(ctx, fmt.Sprint("p2-", i), "ines", data).GetMediaId())
			}
			f.knobs(map[string]string{"pool2": "off", "pool1": "force", "pool1_drain_per_s": "0"})
			var p1 []string
			for i := range 3 {
				p1 = append(p1, f.mustUpload(ctx, fmt.Sprint("p1-", i), "ines", data).GetMediaId())
			}
			if f.pool2.Stats().Items == 0 || f.pool1.Stats().Items == 0 {
				t.Fatalf("pools not filled: pool1 %d, pool2 %d items", f.pool1.Stats().Items, f.pool2.Stats().Items)
			}
			if !keep {
				f.knobs(map[string]string{"pool1": "auto", "pool1_drain_per_s": "50"})
			}

			rep, err := f.srv.Retire(ctx)
			if err != nil {
				t.Fatalf("Retire: %v (%+v)", err, rep)
			}
			if !f.node.Draining() {
				t.Error("node not draining (health NOT_SERVING) after Retire")
			}
			if rep.Pool2Drained != 5 || rep.Pool2Left != 0 {
				t.Errorf("report %+v: want 5 pool-2 items drained, none left", rep)
			}
			if _, err := f.begin(ctx, "after-retire", "ines", data); status.Code(err) != codes.Unavailable || !bytes.Contains([]byte(err.Error()), []byte(upload.ReasonRetiring)) {
				t.Errorf("Begin on a retiring front = %v, want UNAVAILABLE %s", err, upload.ReasonRetiring)
			}
			check := func(ids []string, inStore bool) {
				for _, id := range ids {
					mid, _ := media.Parse(id)
					info, err := f.store.Stat(ctx, media.RawKey(mid.Key))
					if !inStore {
						if err == nil {
							t.Errorf("%s drained although RetireKeepPool1", id)
						}
						continue
					}
					if err != nil {
						t.Errorf("%s not in the store after retire: %v", id, err)
						continue
					}
					if got := storeBytes(t, f.store, media.RawKey(mid.Key)); !bytes.Equal(got, data) || info.Size != int64(len(data)) {
						t.Errorf("%s: %d bytes in the store, want the %d uploaded", id, len(got), len(data))
					}
					m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
					if err != nil || m.GetLocation() != "store" {
						t.Errorf("GetMedia %s = %v, %v", id, m, err)
					}
					if got, err := f.read(ctx, id, "raw"); err != nil || !bytes.Equal(got, data) {
						t.Errorf("read %s after retire: %d bytes, %v", id, len(got), err)
					}
				}
			}
			check(p2, true)
			check(p1, !keep)
			if f.pool2.Stats().Items != 0 {
				t.Errorf("pool 2 holds %d items after retire", f.pool2.Stats().Items)
			}
			if left := f.pool1.Stats().Items; keep != (left > 0) {
				t.Errorf("pool 1 holds %d items after retire (keep %v)", left, keep)
			}
			// Nothing duplicated: every upload kept its own media ID (a
			// drained item keeps its ID; the store key is the ID's key) and
			// its pool copy is gone once it is in the store.
			seen := map[string]bool{}
			for _, id := range append(append([]string(nil), p2...), p1...) {
				mid, _ := media.Parse(id)
				if seen[mid.Key] {
					t.Errorf("two uploads share the media key of %s", id)
				}
				seen[mid.Key] = true
				if _, _, err := f.pool2.Get(media.RawKey(mid.Key)); err == nil {
					t.Errorf("%s still in pool 2 after retire", id)
				}
			}
		})
	}
}

// TestRetireHandsJobsOver retires a front whose compress jobs cannot run
// (compress down): they move to the region's shared journal in Redis, and
// another front of the region finishes them.
func TestRetireHandsJobsOver(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rdb := rt.Client(t)
		a := newFront(t, frontOpts{redis: rdb, id: "upload-a-1"})
		ctx := ctxT(t)
		a.compress.setFail(status.Error(codes.ResourceExhausted, "shed (test)"))
		r := a.mustUpload(ctx, "handed", "jo", photo(t))
		rep, err := a.srv.Retire(ctx)
		if err != nil || rep.JobsHandedOver != 1 {
			t.Fatalf("Retire = %+v, %v; want 1 job handed over", rep, err)
		}
		if n, _ := rdb.ZCard(ctx, "willow:upload:upload-a-1:compress").Result(); n != 0 {
			t.Errorf("retired front's own journal holds %d jobs", n)
		}
		if n, _ := rdb.ZCard(ctx, "willow:upload:a:handover").Result(); n != 1 {
			t.Fatalf("shared journal holds %d jobs, want 1", n)
		}
		b := newFront(t, frontOpts{redis: rdb, id: "upload-a-2", store: a.store.Store})
		eventually(t, "the other front compresses the handed-over job", func() bool {
			m, err := b.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && m.GetState() == "ready" && len(m.GetVariants()) == 3
		})
		eventually(t, "shared journal empty", func() bool {
			n, _ := rdb.ZCard(ctx, "willow:upload:a:handover").Result()
			return n == 0
		})
	})
}
