package compress_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/disintegration/imaging"

	"willow/compress"
	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store/fs"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite compress/testdata/orient-*.jpg")

const (
	sharedPhotos = "../../shared/testdata/photos"
	sharedBad    = "../../shared/testdata/bad"
	sharedVideos = "../../shared/testdata/videos"
)

// quadrants is the upright orientation fixture: 40x20, red top-left, green
// top-right, blue bottom-left, white bottom-right.
func quadrants() *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, 40, 20))
	for y := 0; y < 20; y++ {
		for x := 0; x < 40; x++ {
			var c color.NRGBA
			switch {
			case x < 20 && y < 10:
				c = color.NRGBA{255, 0, 0, 255}
			case y < 10:
				c = color.NRGBA{0, 255, 0, 255}
			case x < 20:
				c = color.NRGBA{0, 0, 255, 255}
			default:
				c = color.NRGBA{255, 255, 255, 255}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	return img
}

// storedFor returns the pixels a camera stores for an upright image shown
// with EXIF orientation o (the inverse of the display transform).
func storedFor(up image.Image, o int) image.Image {
	switch o {
	case 2:
		return imaging.FlipH(up)
	case 3:
		return imaging.Rotate180(up)
	case 4:
		return imaging.FlipV(up)
	case 5:
		return imaging.Transpose(up)
	case 6:
		return imaging.Rotate90(up)
	case 7:
		return imaging.Transverse(up)
	case 8:
		return imaging.Rotate270(up)
	}
	return up
}

// withOrientation inserts an EXIF APP1 segment carrying orientation o
// right after the SOI marker of a JPEG.
func withOrientation(jpg []byte, o int) []byte {
	var tiff bytes.Buffer
	tiff.WriteString("MM\x00\x2a")
	binary.Write(&tiff, binary.BigEndian, uint32(8))
	binary.Write(&tiff, binary.BigEndian, uint16(1))      // one entry
	binary.Write(&tiff, binary.BigEndian, uint16(0x0112)) // Orientation
	binary.Write(&tiff, binary.BigEndian, uint16(3))      // SHORT
	binary.Write(&tiff, binary.BigEndian, uint32(1))
	binary.Write(&tiff, binary.BigEndian, uint16(o))
	binary.Write(&tiff, binary.BigEndian, uint16(0))
	binary.Write(&tiff, binary.BigEndian, uint32(0)) // no next IFD
	seg := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	var out bytes.Buffer
	out.Write(jpg[:2])
	out.Write([]byte{0xFF, 0xE1})
	binary.Write(&out, binary.BigEndian, uint16(len(seg)+2))
	out.Write(seg)
	out.Write(jpg[2:])
	return out.Bytes()
}

func orientFixture(t *testing.T, o int) []byte {
	t.Helper()
	path := filepath.Join("testdata", "orient-"+string(rune('0'+o))+".jpg")
	if *updateFixtures {
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, storedFor(quadrants(), o), &jpeg.Options{Quality: 95}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, withOrientation(buf.Bytes(), o), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-fixtures to make it)", err)
	}
	return b
}

// gradient makes a w x h test photo with some texture.
func gradient(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = uint8(x*255/w), uint8(y*255/h), uint8((x^y)&255), 255
		}
	}
	return img
}

func jpegOf(t testing.TB, img image.Image, q int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type env struct {
	node  *node.Node
	store *fs.Store
	srv   *compress.Server
	cli   willowv1.CompressClient
}

// newEnv builds a compress node with a directory store and a gRPC client.
func newEnv(t *testing.T, cfg compress.Config) *env {
	t.Helper()
	n, err := node.New(node.Config{ID: "compress-t", Role: "compress", Region: "a"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	srv, err := compress.New(cfg, compress.Deps{Node: n, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	go srv.Run(ctx)
	t.Cleanup(func() { cancel(); <-done })
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{node: n, store: st, srv: srv, cli: willowv1.NewCompressClient(conn)}
}

// ffmpeg runs ffmpeg with args, failing the test on error.
func ffmpeg(t testing.TB, args ...string) {
	t.Helper()
	testenv.LookPath(t, "ffmpeg")
	out, err := exec.Command("ffmpeg", append([]string{"-nostdin", "-hide_banner", "-v", "error", "-y"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg %v: %v\n%s", args, err, out)
	}
}
