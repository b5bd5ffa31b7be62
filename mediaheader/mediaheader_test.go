package mediaheader_test

import (
	"errors"
	"os"
	"testing"

	"willow/mediaheader"
)

// The format table and fuzzing live in compress (CheckHeader); these check
// the package on its own, as the upload front uses it.
func TestCheck(t *testing.T) {
	tests := []struct {
		file string
		want error
	}{
		{"../compress/testdata/bomb.png", mediaheader.ErrPixelBomb},
		{"../compress/testdata/small.heic", nil},
	}
	for _, tc := range tests {
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
