package mediaheader_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"willow/mediaheader"
)

const (
	sharedPhotos = "../../shared/testdata/photos"
	sharedBad    = "../../shared/testdata/bad"
)

func read(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheck is the format table of Check: each format's dimensions, the
// pixel limit, and truncated or foreign input.
// small.heic: heif-enc -q 50 of a 64x64 JPEG.
func TestCheck(t *testing.T) {
	heic := read(t, "testdata/small.heic")
	jpeg := read(t, filepath.Join(sharedPhotos, "mate_Storm.jpg"))
	tests := []struct {
		name   string
		data   []byte
		max    int64
		format mediaheader.Format
		w, h   int
		err    error
	}{
		{"jpeg photo", jpeg, 50_000_000, mediaheader.FormatJPEG, 1920, 1280, nil},
		{"png photo", read(t, filepath.Join(sharedPhotos, "skimage_coffee.png")), 50_000_000, mediaheader.FormatPNG, 600, 400, nil},
		{"heic", heic, 50_000_000, mediaheader.FormatHEIC, 64, 64, nil},
		{"png bomb", read(t, filepath.Join(sharedBad, "bomb.png")), 50_000_000, mediaheader.FormatPNG, 50000, 50000, mediaheader.ErrPixelBomb},
		{"bomb copy", read(t, "testdata/bomb.png"), 50_000_000, mediaheader.FormatPNG, 50000, 50000, mediaheader.ErrPixelBomb},
		{"jpeg over small limit", jpeg, 1000, mediaheader.FormatJPEG, 1920, 1280, mediaheader.ErrPixelBomb},
		{"heic over small limit", heic, 1000, mediaheader.FormatHEIC, 64, 64, mediaheader.ErrPixelBomb},
		{"garbage", []byte("hello, this is not an image"), 50_000_000, "", 0, 0, mediaheader.ErrUnsupported},
		{"empty", nil, 50_000_000, "", 0, 0, mediaheader.ErrCorrupt},
		{"jpeg cut in header", jpeg[:100], 50_000_000, mediaheader.FormatJPEG, 0, 0, mediaheader.ErrCorrupt},
		{"heic cut in header", heic[:40], 50_000_000, mediaheader.FormatHEIC, 0, 0, mediaheader.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, w, h, err := mediaheader.Check(bytes.NewReader(tt.data), tt.max)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if f != tt.format || (tt.w != 0 && (w != tt.w || h != tt.h)) {
				t.Fatalf("got %s %dx%d, want %s %dx%d", f, w, h, tt.format, tt.w, tt.h)
			}
		})
	}
}

// TestCheckFile reads from a file, as the upload front does.
func TestCheckFile(t *testing.T) {
	for _, tc := range []struct {
		file string
		want error
	}{
		{"testdata/bomb.png", mediaheader.ErrPixelBomb},
		{"testdata/small.heic", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, w, h, err := mediaheader.Check(f, 50_000_000)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Check = %dx%d %v, want %v", w, h, err, tc.want)
			}
			if tc.want == nil && (w == 0 || h == 0) {
				t.Fatalf("no dimensions: %dx%d", w, h)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	for _, p := range []string{filepath.Join(sharedPhotos, "mate_Storm.jpg"), filepath.Join(sharedPhotos, "skimage_coffee.png"),
		"testdata/bomb.png", "testdata/small.heic"} {
		b := read(f, p)
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 1 << 20
		_, w, h, err := mediaheader.Check(bytes.NewReader(b), max)
		if err == nil && (w <= 0 || h <= 0 || int64(w)*int64(h) > max) {
			t.Fatalf("accepted %dx%d", w, h)
		}
	})
}
