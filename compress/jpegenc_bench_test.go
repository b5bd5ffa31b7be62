package compress_test

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"
	"time"

	"willow/compress"
	"willow/flex"
)

// BenchmarkJPEGEncode compares the shipped JPEG encoder (libjpeg-turbo,
// optimized Huffman tables, 4:2:0, baseline) with Go's image/jpeg on every
// rendition (thumb, medium, large) of every corpus photo: process CPU and
// bytes per photo, the two encoders alternating on the same pixels, and
// ffmpeg SSIM of each against the rendition. Reports medians over b.N
// rounds and the turbo/stdlib ratios.
func BenchmarkJPEGEncode(b *testing.B) {
	dir := b.TempDir()
	type rend struct {
		img *image.NRGBA
		ref string
	}
	var rends [][]rend
	for pi, p := range photos(b) {
		src := decodePhoto(b, p)
		var rs []rend
		for i, r := range compress.Renditions(src) {
			ref := filepath.Join(dir, fmt.Sprintf("ref-%d-%d.png", pi, i))
			writePNG(b, ref, r)
			rs = append(rs, rend{r, ref})
		}
		rends = append(rends, rs)
	}
	for _, q := range []int{50, 85} {
		b.Run(fmt.Sprintf("q%d", q), func(b *testing.B) {
			encoders := []struct {
				name string
				enc  func(*image.NRGBA) ([]byte, error)
			}{
				{"stdlib", func(img *image.NRGBA) ([]byte, error) {
					var buf bytes.Buffer
					err := jpeg.Encode(&buf, &image.RGBA{Pix: img.Pix, Stride: img.Stride, Rect: img.Rect}, &jpeg.Options{Quality: q})
					return buf.Bytes(), err
				}},
				{"turbo", func(img *image.NRGBA) ([]byte, error) {
					o, err := compress.Encode(img, "x", compress.ImageOptions{Codec: flex.CodecJPEG, Quality: q})
					return o.Data, err
				}},
			}
			cpu := make([]time.Duration, len(encoders))
			size := make([]int, len(encoders))
			ssims := make([]float64, len(encoders))
			nssim := 0
			rounds := 0
			for b.Loop() {
				for _, rs := range rends {
					for _, r := range rs {
						for k := range encoders {
							e := (k + rounds) % len(encoders)
							c0 := cpuNow()
							out, err := encoders[e].enc(r.img)
							cpu[e] += cpuNow() - c0
							if err != nil {
								b.Fatal(err)
							}
							size[e] += len(out)
							if rounds == 0 {
								f := filepath.Join(dir, fmt.Sprintf("%s.jpg", encoders[e].name))
								if err := os.WriteFile(f, out, 0o644); err != nil {
									b.Fatal(err)
								}
								ssims[e] += ssim(b, r.ref, f)
							}
						}
						if rounds == 0 {
							nssim++
						}
					}
				}
				rounds++
			}
			photos := float64(rounds * len(rends))
			for e, enc := range encoders {
				b.ReportMetric(cpu[e].Seconds()*1e3/photos, enc.name+"-cpu-ms/photo")
				b.ReportMetric(float64(size[e])/photos/1e3, enc.name+"-KB/photo")
				b.ReportMetric(ssims[e]/float64(nssim), enc.name+"-ssim")
			}
			b.ReportMetric(100*cpu[1].Seconds()/cpu[0].Seconds(), "turbo-%cpu-of-stdlib")
			b.ReportMetric(100*float64(size[1])/float64(size[0]), "turbo-%bytes-of-stdlib")
		})
	}
}
