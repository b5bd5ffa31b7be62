package upload_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	willowv1 "willow/proto/willow/v1"
)

// diskUse is what du says of dir: allocated blocks of its files.
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed by a compaction while the walk ran
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed by a compaction while the walk ran
		}
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDrainedPoolsGiveDiskBack fills pool 1 and pool 2, drains both, and
// checks that the background compaction brings the pool directories' disk
// use back near empty, and that BufferStatus shows live and dead bytes.
func TestDrainedPoolsGiveDiskBack(t *testing.T) {
	f := newFront(t, frontOpts{pools: true, segBytes: 1 << 20})
	ctx := ctxT(t)
	data := photo(t)
	const n = 10
	// Pool 1 first (its continuous drain paused), then pool 2.
	f.knobs(map[string]string{"pool1": "force", "pool1_drain_per_s": "0"})
	for i := range n {
		if r := f.mustUpload(ctx, fmt.Sprint("c1-", i), "kai", data); r.GetLocation() != "pool1" {
			t.Fatalf("upload %d went to %s", i, r.GetLocation())
		}
	}
	f.knobs(map[string]string{"pool1": "off", "pool2": "force", "pool1_drain_per_s": "0"})
	for i := range n {
		if r := f.mustUpload(ctx, fmt.Sprint("c2-", i), "kai", data); r.GetLocation() != "pool2" {
			t.Fatalf("upload %d went to %s", i, r.GetLocation())
		}
	}
	p1, p2 := filepath.Join(f.poolDir, "p1"), filepath.Join(f.poolDir, "p2")
	full1, full2 := diskUse(t, p1), diskUse(t, p2)
	if full1 < n*int64(len(data)) || full2 < n*int64(len(data)) {
		t.Fatalf("filled pools use %d and %d bytes, want at least %d each", full1, full2, n*len(data))
	}
	st, err := f.client.BufferStatus(ctx, &willowv1.BufferStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.GetPools() {
		if p.GetLiveBytes() < n*int64(len(data)) || p.GetDiskBytes() != p.GetLiveBytes()+p.GetDeadBytes() || p.GetSegments() < 2 {
			t.Fatalf("pool %d before the drain: %v", p.GetPool(), p)
		}
	}
	f.knobs(map[string]string{"pool1": "off", "pool2": "off", "pool1_drain_per_s": "1000"})
	for _, pool := range []int32{1, 2} {
		if dr, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: pool, Wait: true}); err != nil || dr.GetRemaining() != 0 {
			t.Fatalf("drain pool %d: %v %v", pool, dr, err)
		}
	}
	const nearEmpty = 64 << 10
	eventually(t, "pool directories back near empty", func() bool {
		return diskUse(t, p1) < nearEmpty && diskUse(t, p2) < nearEmpty
	})
	t.Logf("pool 1: %d -> %d bytes on disk; pool 2: %d -> %d", full1, diskUse(t, p1), full2, diskUse(t, p2))
	var last *willowv1.BufferStatusResponse
	eventually(t, "BufferStatus: no live, no dead bytes, a compaction counted", func() bool {
		st, err := f.client.BufferStatus(ctx, &willowv1.BufferStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		last = st
		for _, p := range st.GetPools() {
			if p.GetItems() != 0 || p.GetLiveBytes() != 0 || p.GetDeadBytes() != 0 || p.GetCompactionsTotal() < 1 {
				return false
			}
		}
		return true
	})
	t.Logf("after: %v", last)
	// Every media item is still there, now from the store.
	for i := range n {
		for _, pre := range []string{"c1-", "c2-"} {
			b, err := f.begin(ctx, fmt.Sprint(pre, i), "kai", data)
			if err != nil || !b.GetCommitted() {
				t.Fatalf("%s%d after compaction: %v %v", pre, i, b, err)
			}
		}
	}
}
