package edgecache_test

import (
	"context"
	"image"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"willow/compress"
	"willow/edgecache"
	"willow/flex"
	"willow/limits"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkJPEGFallback measures what the JPEG fallback costs per photo:
// the edge decodes the three HEIC presets compress made at the normal
// level and encodes each as JPEG at DefaultFallbackQuality (once per OC,
// on the first request of a client without HEIC). For comparison it also
// measures the alternative of making the JPEGs at compress time (encode
// only, from the resized renditions compress already holds).
//
//	go test -run '^$' -bench BenchmarkJPEGFallback -benchtime 3x ./edgecache/
func BenchmarkJPEGFallback(b *testing.B) {
	names := []string{"Bridge_by_Sander_Klootwijk.jpg", "mate_Storm.jpg", "plasma_EveningGlow.jpg"}
	type photo struct {
		heics [][]byte
		rends []*compressRendition
	}
	var photos []photo
	var heicBytes int64
	for _, n := range names {
		raw, err := os.ReadFile(filepath.Join("../../shared/testdata/photos", n))
		if err != nil {
			b.Skipf("fixture: %v", err)
		}
		outs, err := compress.Images(context.Background(), raw, compress.ImageOptions{})
		if err != nil {
			b.Fatal(err)
		}
		src, err := compress.DecodeImage(raw, 0)
		if err != nil {
			b.Fatal(err)
		}
		var p photo
		for _, o := range outs {
			p.heics = append(p.heics, o.Data)
			heicBytes += int64(len(o.Data))
		}
		for _, r := range compress.Renditions(src) {
			p.rends = append(p.rends, &compressRendition{r})
		}
		photos = append(photos, p)
	}
	b.ResetTimer()
	var jpegBytes int64
	start := cpuTime()
	for range b.N {
		jpegBytes = 0
		for _, p := range photos {
			for _, h := range p.heics {
				j, err := edgecache.JPEGFallback(h, limits.DefaultMaxPixels, edgecache.DefaultFallbackQuality)
				if err != nil {
					b.Fatal(err)
				}
				jpegBytes += int64(len(j))
			}
		}
	}
	edge := cpuTime() - start
	b.StopTimer()
	start = cpuTime()
	for range b.N {
		for _, p := range photos {
			for _, r := range p.rends {
				if _, err := compress.Encode(r.img, "", compress.ImageOptions{Codec: flex.CodecJPEG, Quality: edgecache.DefaultFallbackQuality}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	atCompress := cpuTime() - start
	per := float64(b.N * len(photos))
	b.ReportMetric(float64(edge.Milliseconds())/per, "edge-cpu-ms/photo")
	b.ReportMetric(float64(atCompress.Milliseconds())/per, "compress-time-cpu-ms/photo")
	b.ReportMetric(float64(heicBytes)/float64(len(photos))/1024, "heic-KiB/photo")
	b.ReportMetric(float64(jpegBytes)/float64(len(photos))/1024, "jpeg-KiB/photo")
}

type compressRendition struct{ img *image.NRGBA }
