package mediaheader_test

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"willow/mediaheader"
)

func TestVideoDuration(t *testing.T) {
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := read("testdata/black-600s.mp4") // moov after mdat
	tests := []struct {
		name    string
		data    []byte
		want    time.Duration
		wantErr error
	}{
		{"mp4 moov at end", long, 600 * time.Second, nil},
		{"mp4 faststart", read("testdata/red-3s-faststart.mp4"), 3 * time.Second, nil},
		{"avi", read("../../shared/testdata/videos/tree.avi"), 29600 * time.Millisecond, nil},
		{"avi long", read("../../shared/testdata/videos/vtest.avi"), 79500 * time.Millisecond, nil},
		{"mpeg-ps", read("../../shared/testdata/videos/cube.mpeg"), 0, mediaheader.ErrUnsupported},
		{"random", bytes.Repeat([]byte{0x13, 0x37, 0xca, 0xfe}, 1000), 0, mediaheader.ErrUnsupported},
		{"truncated mp4", long[:len(long)/2], 0, mediaheader.ErrCorrupt},
		{"short", []byte("ftyp"), 0, mediaheader.ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mediaheader.VideoDuration(bytes.NewReader(tc.data), int64(len(tc.data)))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := got - tc.want; d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Fatalf("duration %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzVideoDuration(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x10ftypisom\x00\x00\x00\x00"))
	f.Add([]byte("RIFF\x00\x00\x00\x00AVI LIST"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = mediaheader.VideoDuration(bytes.NewReader(b), int64(len(b)))
	})
}
