package upload

import (
	"bytes"
	"os"
	"testing"

	"willow/mediaheader"
	willowv1 "willow/proto/willow/v1"
)

// TestSniffEarlyAcrossSegments: a first chunk given as segments is
// sniffed on its gathered head whatever the cut (one byte a segment
// included): a JPEG passes, bytes that are no image are refused, and a
// chunk that is not at offset 0 or too short for a verdict is not sniffed.
// An empty chunk of an empty upload is refused, as a whole one would be.
func TestSniffEarlyAcrossSegments(t *testing.T) {
	jpeg, err := os.ReadFile("../../shared/testdata/photos/mate_Wood.jpg")
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("<html>not a photo</html>\n"), 100)
	cut := func(b []byte, n int) [][]byte {
		var segs [][]byte
		for len(b) > 0 {
			k := min(n, len(b))
			segs, b = append(segs, b[:k]), b[k:]
		}
		return segs
	}
	st := func(size int) *staged {
		return &staged{meta: stageMeta{Kind: int32(willowv1.Kind_KIND_IMAGE), Size: int64(size)}}
	}
	for _, n := range []int{1, 7, mediaheader.SniffBytes - 1, mediaheader.SniffBytes, 1 << 20} {
		if err := sniffEarly(st(len(jpeg)), 0, cut(jpeg[:2*mediaheader.SniffBytes], n)); err != nil {
			t.Fatalf("JPEG in segments of %d: %v", n, err)
		}
		if err := sniffEarly(st(len(text)), 0, cut(text, n)); err == nil {
			t.Fatalf("text in segments of %d: accepted", n)
		}
		if err := sniffEarly(st(len(text)), 4096, cut(text, n)); err != nil {
			t.Fatalf("text at offset 4096 in segments of %d: %v (only offset 0 is sniffed)", n, err)
		}
		if err := sniffEarly(st(len(text)), 0, cut(text[:100], n)); err != nil {
			t.Fatalf("100 bytes of text in segments of %d: %v (too short for a verdict)", n, err)
		}
	}
	// An empty upload's empty chunk: nothing shows it is media (and no
	// segment to index).
	if err := sniffEarly(st(0), 0, nil); err == nil {
		t.Fatal("an empty chunk of an empty upload: accepted")
	}
}
