package edgecache_test

import (
	"net/http"
	"testing"
	"time"

	"willow/edgecache"
	"willow/media"
)

// TestFillBudgetNotLeakedByMisses: a variant polled before it exists (the
// store read fails) gives its fill memory back, so later fills still run.
// With the budget at one slice, a single leak would make the next fill wait
// for memory until its origin deadline.
func TestFillBudgetNotLeakedByMisses(t *testing.T) {
	st := newStore(t)
	data := payload(3000, 7)
	id := put(t, st, media.LocStore, 1, media.VariantRaw, "image/jpeg", data)
	e := startEdge(t, "edge-a-1", edgecache.Config{
		SliceBytes: edgecache.MinSliceBytes, FillBudgetBytes: edgecache.MinSliceBytes, OriginTimeout: 2 * time.Second,
	}, edgecache.Deps{Store: st})
	for range 4 {
		resp, _ := get(t, e.url+path(id, media.VariantThumb), nil)
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("thumb that does not exist: status %d", resp.StatusCode)
		}
	}
	resp, body := get(t, e.url+path(id, media.VariantRaw), nil)
	if resp.StatusCode != http.StatusOK || len(body) != len(data) {
		t.Fatalf("raw after misses: status %d, %d bytes: %s", resp.StatusCode, len(body), body)
	}
}
