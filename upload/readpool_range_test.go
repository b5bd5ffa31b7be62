package upload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
)

// readRange reads bytes [off, off+n) of an item through ReadPool and the
// size its first chunk announces.
func (f *front) readRange(ctx context.Context, id, variant string, off, n int64) ([]byte, int64, error) {
	s, err := f.client.ReadPool(ctx, &willowv1.ReadPoolRequest{MediaId: id, Variant: variant, Offset: off, Length: n})
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	size := int64(-1)
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, size, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if size < 0 {
			size = c.GetSize()
		}
		out = append(out, c.GetData()...)
	}
}

// TestReadPoolRange: ReadPool serves byte ranges of a pool-2 item, before
// and after its drain, with the whole item's size in the first chunk.
func TestReadPoolRange(t *testing.T) {
	f := newFront(t, frontOpts{pools: true})
	ctx := ctxT(t)
	f.knobs(map[string]string{"store_write_budget": "1"})
	data := photo(t)
	var id string
	for i := range 6 {
		r := f.mustUpload(ctx, fmt.Sprint("r", i), "ida", data)
		if mid, _ := media.Parse(r.GetMediaId()); mid.Loc == media.LocPool2 {
			id = r.GetMediaId()
			break
		}
	}
	if id == "" {
		t.Fatal("no upload went to pool 2")
	}
	size := int64(len(data))
	check := func(when string) {
		for _, tc := range []struct{ off, n int64 }{{0, 100}, {size / 2, 1000}, {size - 10, 100}, {100, 0}, {size + 5, 10}} {
			got, whole, err := f.readRange(ctx, id, "raw", tc.off, tc.n)
			if err != nil {
				t.Fatalf("%s: range %d+%d: %v", when, tc.off, tc.n, err)
			}
			from, to := min(tc.off, size), size
			if tc.n > 0 {
				to = min(tc.off+tc.n, size)
			}
			if !bytes.Equal(got, data[from:to]) || whole != size {
				t.Fatalf("%s: range %d+%d: %d bytes (size %d), want %d of %d", when, tc.off, tc.n, len(got), whole, to-from, size)
			}
		}
		if _, err := f.client.ReadPool(ctx, &willowv1.ReadPoolRequest{MediaId: id, Variant: "raw", Offset: -1}); err == nil {
			// A streaming call reports its error on Recv.
			if _, _, err := f.readRange(ctx, id, "raw", -1, 0); err == nil {
				t.Fatalf("%s: negative offset accepted", when)
			}
		}
	}
	check("in pool 2")
	if _, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true}); err != nil {
		t.Fatal(err)
	}
	check("after the drain")
}
