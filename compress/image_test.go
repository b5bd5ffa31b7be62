package compress_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"willow/compress"
	"willow/flex"
	"willow/internal/testenv"
	"willow/media"
)

func TestDecodeBadInput(t *testing.T) {
	tests := []struct {
		file string
		err  error
	}{
		{filepath.Join(sharedBad, "bomb.png"), compress.ErrPixelBomb},
		{filepath.Join(sharedBad, "truncated.jpg"), compress.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			b, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			_, err = compress.Images(context.Background(), b, compress.ImageOptions{Codec: flex.CodecJPEG})
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestPresetDimensions(t *testing.T) {
	tests := []struct {
		name  string
		w, h  int
		codec flex.ImageCodec
		want  [][2]int // large, medium, thumb
	}{
		{"landscape 3000x2000", 3000, 2000, flex.CodecJPEG, [][2]int{{1920, 1280}, {1080, 720}, {240, 160}}},
		{"portrait 1500x2500", 1500, 2500, flex.CodecJPEG, [][2]int{{1152, 1920}, {648, 1080}, {144, 240}}},
		{"between presets 1200x900", 1200, 900, flex.CodecJPEG, [][2]int{{1200, 900}, {1080, 810}, {240, 180}}},
		{"small is never upscaled", 200, 100, flex.CodecJPEG, [][2]int{{200, 100}, {200, 100}, {200, 100}}},
		{"heic odd sizes", 1001, 667, flex.CodecHEIC, [][2]int{{1001, 667}, {1001, 667}, {240, 160}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := compress.Images(context.Background(), jpegOf(t, gradient(tt.w, tt.h), 90),
				compress.ImageOptions{Codec: tt.codec, Quality: 60})
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"large", "medium", "thumb"}
			if len(outs) != 3 {
				t.Fatalf("%d outputs", len(outs))
			}
			for i, o := range outs {
				if o.Name != names[i] || o.Width != tt.want[i][0] || o.Height != tt.want[i][1] {
					t.Errorf("%s: %dx%d, want %s %dx%d", o.Name, o.Width, o.Height, names[i], tt.want[i][0], tt.want[i][1])
				}
				if o.Codec != string(tt.codec) || o.Quality != 60 || len(o.Data) == 0 || len(o.SHA256) != 64 {
					t.Errorf("%s: codec %s q%d %d bytes", o.Name, o.Codec, o.Quality, len(o.Data))
				}
				if tt.codec == flex.CodecJPEG {
					img, _, err := image.Decode(bytes.NewReader(o.Data))
					if err != nil || img.Bounds().Dx() != o.Width || img.Bounds().Dy() != o.Height {
						t.Errorf("%s: decoded %v, %v", o.Name, img.Bounds(), err)
					}
				} else {
					img, err := compress.DecodeImage(o.Data, 0)
					if err != nil || img.Bounds().Dx() != o.Width || img.Bounds().Dy() != o.Height {
						t.Errorf("%s: heic decoded %v, %v", o.Name, img, err)
					}
				}
			}
		})
	}
}

// TestOrientations checks the eight EXIF orientations: each fixture stores
// the quadrant picture transformed so that applying its orientation shows
// red top-left, green top-right, blue bottom-left, white bottom-right.
func TestOrientations(t *testing.T) {
	type rgb struct{ r, g, b uint32 }
	want := []struct {
		x, y int
		c    rgb
	}{{10, 5, rgb{255, 0, 0}}, {30, 5, rgb{0, 255, 0}}, {10, 15, rgb{0, 0, 255}}, {30, 15, rgb{255, 255, 255}}}
	for o := 1; o <= 8; o++ {
		t.Run("orientation "+strconv.Itoa(o), func(t *testing.T) {
			outs, err := compress.Images(context.Background(), orientFixture(t, o),
				compress.ImageOptions{Codec: flex.CodecJPEG, Quality: 95})
			if err != nil {
				t.Fatal(err)
			}
			large := outs[0]
			if large.Width != 40 || large.Height != 20 {
				t.Fatalf("large %dx%d, want 40x20", large.Width, large.Height)
			}
			img, _, err := image.Decode(bytes.NewReader(large.Data))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range want {
				r, g, b, _ := img.At(p.x, p.y).RGBA()
				got := rgb{r >> 8, g >> 8, b >> 8}
				if diff(got.r, p.c.r) > 40 || diff(got.g, p.c.g) > 40 || diff(got.b, p.c.b) > 40 {
					t.Errorf("pixel (%d,%d) = %v, want %v", p.x, p.y, got, p.c)
				}
			}
			if bytes.Contains(large.Data, []byte("Exif")) {
				t.Error("output still carries EXIF")
			}
		})
	}
}

func diff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestHEICDecodesWithHeifConvert encodes a real photo to HEIC and decodes
// every variant with libheif's heif-convert tool, and feeds the HEIC back
// in as input (phones upload HEIC).
func TestHEICDecodesWithHeifConvert(t *testing.T) {
	testenv.LookPath(t, "heif-convert")
	src, err := os.ReadFile(filepath.Join(sharedPhotos, "mate_Storm.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := compress.Images(context.Background(), src, compress.ImageOptions{Codec: flex.CodecHEIC, Quality: 70})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, o := range outs {
		if o.ContentType != "image/heic" {
			t.Errorf("%s content type %q", o.Name, o.ContentType)
		}
		in, out := filepath.Join(dir, o.Name+".heic"), filepath.Join(dir, o.Name+".png")
		if err := os.WriteFile(in, o.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("heif-convert", in, out).CombinedOutput(); err != nil {
			t.Fatalf("heif-convert %s: %v\n%s", o.Name, err, b)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width != o.Width || cfg.Height != o.Height {
			t.Errorf("%s: heif-convert gave %dx%d (%v), want %dx%d", o.Name, cfg.Width, cfg.Height, err, o.Width, o.Height)
		}
	}
	// HEIC input: the large HEIC goes through the pipeline again.
	again, err := compress.Images(context.Background(), outs[0].Data, compress.ImageOptions{Codec: flex.CodecJPEG, Quality: 80})
	if err != nil {
		t.Fatalf("heic input: %v", err)
	}
	if again[0].Width != 1920 || again[0].Height != 1280 || again[2].Width != 240 {
		t.Errorf("heic input gave %dx%d / %dx%d", again[0].Width, again[0].Height, again[2].Width, again[2].Height)
	}
	// A truncated HEIC is corrupt, not a crash.
	if _, err := compress.Images(context.Background(), outs[0].Data[:len(outs[0].Data)/2], compress.ImageOptions{}); !errors.Is(err, compress.ErrCorrupt) {
		t.Errorf("truncated heic: %v, want ErrCorrupt", err)
	}
}

// TestMemoryBound runs the 20 MP photo through the pipeline and
// checks the Go heap stays under 512 MiB (peak sampled, and the total
// allocated by the task as an upper bound).
func TestMemoryBound(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(sharedPhotos, "Kleiber_by_Lukas_Baubkus.jpg")) // 6028x3391 = 20.4 MP
	if err != nil {
		t.Fatal(err)
	}
	const limit = 512 << 20
	// Only the JPEG codec: both paths share decode and resize, and x265's
	// memory is C memory that MemStats does not see.
	for _, codec := range []flex.ImageCodec{flex.CodecJPEG} {
		t.Run(string(codec), func(t *testing.T) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			var peak atomic.Uint64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > peak.Load() {
						peak.Store(ms.HeapAlloc)
					}
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			if _, err := compress.Images(context.Background(), src, compress.ImageOptions{Codec: codec, Quality: 50}); err != nil {
				t.Fatal(err)
			}
			close(stop)
			<-done
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			total := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: peak heap %d MiB, allocated by task %d MiB", codec, peak.Load()>>20, total>>20)
			if peak.Load() > limit || total > limit {
				t.Errorf("20 MP photo took peak %d MiB / total %d MiB, limit 512 MiB", peak.Load()>>20, total>>20)
			}
		})
	}
}

// TestHEICX265Params checks that x265 parameters reach the encoder (two
// settings of one parameter give different bitstreams, both decodable)
// and that a malformed one is an error, not silently dropped.
func TestHEICX265Params(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(sharedPhotos, "mate_Storm.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := compress.DecodeImage(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	med := compress.Renditions(img)[1]
	var got [2][]byte
	for i, v := range []string{"0", "1"} {
		o, err := compress.Encode(med, media.VariantMedium, compress.ImageOptions{Codec: flex.CodecHEIC, HEICX265: []string{"pools=none", "sao=" + v}})
		if err != nil {
			t.Fatalf("sao=%s: %v", v, err)
		}
		if _, err := compress.DecodeImage(o.Data, 0); err != nil {
			t.Fatalf("sao=%s: decode: %v", v, err)
		}
		got[i] = o.Data
	}
	if bytes.Equal(got[0], got[1]) {
		t.Error("sao=0 and sao=1 gave the same bitstream: x265 parameters are not applied")
	}
	if _, err := compress.Encode(med, media.VariantMedium, compress.ImageOptions{Codec: flex.CodecHEIC, HEICX265: []string{"sao"}}); err == nil {
		t.Error("x265 parameter without a value: no error")
	}
	// The thumb as JPEG (a measured lever, not the default): only the thumb changes codec.
	outs, err := compress.Images(context.Background(), src, compress.ImageOptions{Codec: flex.CodecHEIC, HEICThumbJPEG: 85})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		want, q := "image/heic", flex.DefaultImageQuality
		if o.Name == media.VariantThumb {
			want, q = "image/jpeg", 85
		}
		if o.ContentType != want || o.Quality != q {
			t.Errorf("%s: %s q%d, want %s q%d", o.Name, o.ContentType, o.Quality, want, q)
		}
	}
}
