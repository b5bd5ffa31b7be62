package compress_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"willow/compress"
	"willow/flex"
	"willow/internal/testenv"
)

// mdatRange returns the payload range of a HEIF file's mdat box.
func mdatRange(t *testing.T, b []byte) (int, int) {
	t.Helper()
	for pos := 0; pos+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[pos:]))
		if n < 8 || pos+n > len(b) {
			break
		}
		if string(b[pos+4:pos+8]) == "mdat" {
			return pos + 8, pos + n
		}
		pos += n
	}
	t.Fatal("no mdat box")
	return 0, 0
}

// TestCorruptHEVCFails damages a real HEIC (testdata/dragonfly-640.heic:
// vipsthumbnail -s 640 of the corpus's Dragonfly_by_Bolly.jpg, then
// heif-enc -q 60) inside its HEVC data — the header and every box intact
// — at several places. Stock libheif (heif-convert, libheif's own
// libde265 plugin) still makes a picture of each, concealing the damage;
// compress must refuse every one as corrupt, never make variants of it.
// (A scan of 49 places, every 2% of the data, caught 48: damage that
// libde265 decodes without any error or warning cannot be told apart
// from a valid picture.)
func TestCorruptHEVCFails(t *testing.T) {
	conv := testenv.LookPath(t, "heif-convert")
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/dragonfly-640.heic")
	if err != nil {
		t.Fatal(err)
	}
	opt := compress.ImageOptions{Codec: flex.CodecJPEG, Quality: 50}
	if outs, err := compress.Images(context.Background(), data, opt); err != nil || len(outs) != 3 {
		t.Fatalf("the intact HEIC: %d variants, %v", len(outs), err)
	}
	s, e := mdatRange(t, data)
	for _, frac := range []float64{0.1, 0.5, 0.9} {
		t.Run(fmt.Sprintf("at %.0f%%", frac*100), func(t *testing.T) {
			bad := append([]byte(nil), data...)
			o := s + int(float64(e-s)*frac)
			for i := o; i < o+32; i++ {
				bad[i] ^= 0x5A
			}
			p := filepath.Join(dir, "bad.heic")
			if err := os.WriteFile(p, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(conv, p, filepath.Join(dir, "bad.png")).CombinedOutput(); err != nil {
				t.Fatalf("stock heif-convert refused it too (%v: %s): the damage is not the concealed kind", err, out)
			}
			outs, err := compress.Images(context.Background(), bad, opt)
			if !errors.Is(err, compress.ErrCorrupt) {
				t.Fatalf("%d variants, %v; want ErrCorrupt", len(outs), err)
			}
		})
	}
}
