package edgecache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"willow/compress"
	"willow/edgecache"
	"willow/media"
	"willow/rpcstatus"
)

// TestFailedMedia422: a variant of a media item whose record says failed
// is HTTP 422 with the item's reason, not 404; a missing variant of a
// processing item stays 404.
func TestFailedMedia422(t *testing.T) {
	st := newStore(t)
	rec := func(id media.ID, state string) {
		b, _ := json.Marshal(map[string]any{"id": id.String(), "business": "moments", "state": state,
			"reason": compress.ReasonCorruptMedia, "error": "jpeg: premature end of data", "variants": []any{}})
		if err := st.Put(context.Background(), media.RecordKey(id.Key), bytes.NewReader(b), int64(len(b)), "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	failed := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "bad")}
	processing := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: media.KeyFor("u1", "slow")}
	rec(failed, "failed")
	rec(processing, "processing")
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	for _, tc := range []struct {
		name   string
		id     media.ID
		code   int
		reason string
	}{
		{"failed", failed, 422, compress.ReasonCorruptMedia},
		{"processing", processing, 404, rpcstatus.ReasonNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, e.url+path(tc.id, media.VariantThumb), nil)
			var j struct{ Reason, Error string }
			_ = json.Unmarshal(body, &j)
			if resp.StatusCode != tc.code || j.Reason != tc.reason {
				t.Fatalf("status %d reason %q (%s), want %d %s", resp.StatusCode, j.Reason, body, tc.code, tc.reason)
			}
		})
	}
}
