package upload_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/store"
)

func TestPool2SpillOverBudgetThenDrain(t *testing.T) {
	f := newFront(t, frontOpts{pools: true})
	ctx := ctxT(t)
	f.knobs(map[string]string{"store_write_budget": "1"})
	data := photo(t)
	var ids []string
	locs := map[string]int{}
	for i := range 4 {
		r := f.mustUpload(ctx, fmt.Sprint("b", i), "hana", data)
		ids = append(ids, r.GetMediaId())
		locs[r.GetLocation()]++
	}
	if locs["pool2"] < 2 || locs["store"] < 1 {
		t.Fatalf("locations with a budget of 1 write/s: %v", locs)
	}
	var p2 []string
	for _, id := range ids {
		if mid, _ := media.Parse(id); mid.Loc == media.LocPool2 {
			p2 = append(p2, id)
		}
	}
	// Pool-2 media are downloadable at once, raw and variants.
	for _, id := range p2 {
		got, err := f.read(ctx, id, "raw")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadPool raw %s: %d bytes, %v", id, len(got), err)
		}
		eventually(t, "pool-2 variants", func() bool {
			th, err := f.read(ctx, id, "thumb")
			return err == nil && bytes.HasPrefix(th, []byte("thumb of"))
		})
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		if err != nil || m.GetLocation() != "pool2" || m.GetState() != "ready" {
			t.Fatalf("GetMedia %s = %v, %v", id, m, err)
		}
	}
	st, err := f.client.BufferStatus(ctx, &willowv1.BufferStatusRequest{})
	if err != nil || st.GetPools()[1].GetItems() != int64(len(p2)) || st.GetPools()[1].GetBytes() == 0 {
		t.Fatalf("BufferStatus = %v, %v", st, err)
	}
	// Drain twice: the second finds nothing; reads keep working.
	dr, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true})
	if err != nil || dr.GetDrained() != int64(len(p2)) || dr.GetRemaining() != 0 {
		t.Fatalf("Drain = %v, %v", dr, err)
	}
	dr, err = f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true})
	if err != nil || dr.GetDrained() != 0 {
		t.Fatalf("second Drain = %v, %v", dr, err)
	}
	for _, id := range p2 {
		mid, _ := media.Parse(id)
		if !bytes.Equal(storeBytes(t, f.store, media.RawKey(mid.Key)), data) {
			t.Fatalf("%s not in the store after drain", id)
		}
		if th := storeBytes(t, f.store, media.VariantKey(mid.Key, "thumb")); !bytes.HasPrefix(th, []byte("thumb of")) {
			t.Fatalf("%s variant not drained", id)
		}
		if got, err := f.read(ctx, id, "raw"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadPool after drain: %v", err)
		}
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		if err != nil || m.GetLocation() != "store" || m.GetState() != "ready" || len(m.GetVariants()) != 3 {
			t.Fatalf("GetMedia after drain = %v, %v", m, err)
		}
	}
	if n := f.pool2.Stats().Items; n != 0 {
		t.Fatalf("pool2 holds %d blobs after drain", n)
	}
}

func TestPool2WhenStoreFailsThenDrain(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) { testPool2WhenStoreFails(t, mk(t)) })
	}
}

func testPool2WhenStoreFails(t *testing.T, st store.Store) {
	f := newFront(t, frontOpts{pools: true, store: st})
	ctx := ctxT(t)
	data := photo(t)
	f.store.down.Store(true)
	r := f.mustUpload(ctx, "down", "ida", data)
	if r.GetLocation() != "pool2" {
		t.Fatalf("store down: location %q", r.GetLocation())
	}
	if got, err := f.read(ctx, r.GetMediaId(), "raw"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read while store down: %v", err)
	}
	if _, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true}); err == nil {
		t.Fatal("drain succeeded with the store down")
	}
	f.store.down.Store(false)
	if _, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true}); err != nil {
		t.Fatal(err)
	}
	mid, _ := media.Parse(r.GetMediaId())
	if !bytes.Equal(storeBytes(t, f.store, media.RawKey(mid.Key)), data) {
		t.Fatal("not in the store after drain")
	}
	eventually(t, "ready in the store", func() bool {
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
		return err == nil && m.GetState() == "ready" && m.GetLocation() == "store"
	})
}

func TestPool1SpillWhenShedAndDrainRate(t *testing.T) {
	f := newFront(t, frontOpts{pools: true})
	ctx := ctxT(t)
	f.knobs(map[string]string{"pool1_drain_per_s": "0"}) // hold the drain
	f.shed(shedding.ReasonOverload)
	data := photo(t)
	const n = 6
	var ids []string
	for i := range n {
		r := f.mustUpload(ctx, fmt.Sprint("z", i), "jo", data)
		if r.GetLocation() != "pool1" {
			t.Fatalf("deferred admission: location %q", r.GetLocation())
		}
		ids = append(ids, r.GetMediaId())
	}
	_, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: ids[0]})
	wantReason(t, err, codes.NotFound, media.ReasonProcessing)
	_, err = f.read(ctx, ids[0], "raw")
	wantReason(t, err, codes.NotFound, media.ReasonProcessing)

	start := time.Now()
	f.knobs(map[string]string{"pool1_drain_per_s": "4"})
	eventually(t, "pool1 drained", func() bool { return f.pool1.Stats().Items == 0 })
	// 6 items at 4/s with a burst of 1: at least 5/4 s.
	if el := time.Since(start); el < 1200*time.Millisecond {
		t.Fatalf("pool1 drained %d items in %s: faster than 4/s", n, el)
	}
	for _, id := range ids {
		eventually(t, "drained media ready", func() bool {
			m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
			return err == nil && m.GetState() == "ready" && len(m.GetVariants()) == 3
		})
	}
	if got, err := f.read(ctx, ids[0], "raw"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after drain: %v", err)
	}
	_ = context.Background
}

func TestShedBeginWithoutPool1(t *testing.T) {
	ctx := ctxT(t)
	data := photo(t)
	t.Run("no pool: overload rejects", func(t *testing.T) {
		f := newFront(t, frontOpts{})
		f.shed(shedding.ReasonOverload)
		_, err := f.begin(ctx, "s1", "lu", data)
		wantReason(t, err, codes.ResourceExhausted, shedding.ReasonOverload)
	})
	t.Run("pool1 off: overload rejects", func(t *testing.T) {
		f := newFront(t, frontOpts{pools: true})
		f.knobs(map[string]string{"pool1": "off"})
		f.shed(shedding.ReasonOverload)
		_, err := f.begin(ctx, "s2", "lu", data)
		wantReason(t, err, codes.ResourceExhausted, shedding.ReasonOverload)
	})
	t.Run("shed_ratio rejects even with pool1", func(t *testing.T) {
		f := newFront(t, frontOpts{pools: true})
		f.shed(shedding.ReasonShedRatio)
		_, err := f.begin(ctx, "s3", "lu", data)
		wantReason(t, err, codes.ResourceExhausted, shedding.ReasonShedRatio)
	})
	t.Run("a begun upload resumes while shedding", func(t *testing.T) {
		f := newFront(t, frontOpts{})
		if _, err := f.begin(ctx, "s4", "lu", data); err != nil {
			t.Fatal(err)
		}
		f.shed(shedding.ReasonOverload)
		if _, err := f.upload(ctx, "s4", "lu", data); err != nil {
			t.Fatalf("resume while shedding: %v", err)
		}
	})
}
