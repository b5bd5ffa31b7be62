package compress_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"willow/compress"
	"willow/flex"
	"willow/media"
)

// BenchmarkHEICvsJPEG chooses the shipped HEIC quality against a real JPEG.
// For every corpus photo, the source is Willow's own medium (1080) rendition
// (compress.Renditions), written as PNG. The baseline is a JPEG q85 made by
// libjpeg-turbo through vips (`vips jpegsave ref.png out.jpg --Q 85 --strip`,
// what `vipsthumbnail … [Q=85,strip]` writes) from that PNG; Willow's own
// JPEG q85 (libjpeg-turbo, optimized Huffman tables) and a sweep of HEIC
// qualities, x265 tunes and presets are encoded from the same pixels.
//
// SSIM is ffmpeg's, and both sides are decoded the same way: each file's
// own 4:2:0 planes (ffmpeg's MJPEG decoder for JPEG, heif-convert's y4m for
// HEIC, both full-range BT.601) against the source converted once by ffmpeg
// to full-range BT.601 4:2:0, so neither side goes through a chroma
// upsampler ("yuv" columns: Y and All, ffmpeg's 4:1:1 weighting of Y, U, V).
// The "rgb" column is what a viewer sees: each file decoded to RGB by its
// own library (libjpeg-turbo, libheif) against the RGB source. Comparing a
// JPEG in ffmpeg's default way (the source converted to the JPEG's yuvj420p)
// and a HEIC as RGB is the asymmetry that made HEIC look worse from outside.
//
// WILLOW_BENCH_PHOTOS=N limits the corpus to its first N photos.
func BenchmarkHEICvsJPEG(b *testing.B) {
	for _, tool := range []string{"ffmpeg", "vips", "heif-convert"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not installed (scripts/setup.sh)", tool)
		}
	}
	paths := photos(b)
	if n, err := strconv.Atoi(os.Getenv("WILLOW_BENCH_PHOTOS")); err == nil && n > 0 && n < len(paths) {
		paths = paths[:n]
	}
	dir := b.TempDir()
	type setting = heicSetting
	var settings []setting
	settings = append(settings, setting{name: "jpeg vips (baseline)", codec: flex.CodecJPEG, q: 85, vips: true},
		setting{name: "jpeg willow", codec: flex.CodecJPEG, q: 85})
	if spec := os.Getenv("WILLOW_BENCH_HEIC"); spec != "" {
		for _, t := range parseTaskSettings(b, spec) {
			settings = append(settings, setting{name: "heic", codec: flex.CodecHEIC, q: t.opt.Quality, preset: t.opt.HEICPreset,
				tune: "ssim", x265: t.opt.HEICX265})
		}
	} else {
		for _, q := range []int{45, 50, 55, 60, 65} {
			settings = append(settings, setting{name: "heic", codec: flex.CodecHEIC, q: q, preset: compress.DefaultHEICPreset, tune: "ssim"})
		}
		settings = append(settings,
			setting{name: "heic", codec: flex.CodecHEIC, q: 55, preset: compress.DefaultHEICPreset, tune: "psnr"},
			setting{name: "heic (session 4's preset)", codec: flex.CodecHEIC, q: 50, preset: "fast", tune: "ssim", x265: []string{}})
	}
	type sums struct {
		bytes           int64
		yY, yAll, rgb   float64
		cpu             time.Duration
		atLeastBaseline int // photos whose yuv All SSIM >= the baseline's
	}
	res := make([]sums, len(settings))
	n := 0
	for b.Loop() {
		for _, p := range paths {
			src := decodePhoto(b, p)
			med := compress.Renditions(src)[1]
			w, h := med.Rect.Dx(), med.Rect.Dy()
			ref := filepath.Join(dir, "ref.png")
			writePNG(b, ref, med)
			refYUV := filepath.Join(dir, "ref.yuv")
			ffmpeg(b, "-i", ref, "-vf", "scale=out_range=full:out_color_matrix=bt601",
				"-pix_fmt", "yuvj420p", "-f", "rawvideo", refYUV)
			var base float64
			var line []string
			for i, s := range settings {
				var data []byte
				out := filepath.Join(dir, "out")
				if s.vips {
					out += ".jpg"
					run(b, "vips", "jpegsave", ref, out, "--Q", strconv.Itoa(s.q), "--strip")
					var err error
					if data, err = os.ReadFile(out); err != nil {
						b.Fatal(err)
					}
				} else {
					c0 := cpuNow()
					o, err := compress.Encode(med, media.VariantMedium, compress.ImageOptions{Codec: s.codec, Quality: s.q, HEICPreset: s.preset, HEICTune: s.tune, HEICX265: s.x265})
					res[i].cpu += cpuNow() - c0
					if err != nil {
						b.Fatal(err)
					}
					data = o.Data
					out += "." + string(s.codec)
					if err := os.WriteFile(out, data, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				res[i].bytes += int64(len(data))
				// yuv: the file's own planes against the source's.
				dist, pixfmt := out, "yuvj420p"
				if s.codec == flex.CodecHEIC {
					dist = filepath.Join(dir, "out.y4m")
					run(b, "heif-convert", "--quiet", out, dist)
					pixfmt = "yuv420p" // y4m has no range tag; the raw source is declared alike, so no conversion
				}
				y, all := ssimYUV(b, refYUV, pixfmt, w, h, dist)
				res[i].yY += y
				res[i].yAll += all
				if i == 0 {
					base = all
				}
				if all >= base {
					res[i].atLeastBaseline++
				}
				res[i].rgb += ssimOf(b, dir, ref, compress.Output{Data: data})
				line = append(line, fmt.Sprintf("%s q%d %s %d B %.4f", s.name, s.q, s.group(), len(data), all))
			}
			n++
			// Progress on stderr, per photo: a long run cut short still says something.
			fmt.Fprintf(os.Stderr, "%s: %s\n", filepath.Base(p), strings.Join(line, "; "))
		}
	}
	b.StopTimer()
	fn := float64(n)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nmedium (1080) rendition, mean over %d photos; yuv = each file's own 4:2:0 planes vs the source's (ffmpeg ssim), rgb = each decoded by its own library\n\n", len(paths))
	sb.WriteString("| encoder | quality | x265 preset / tune | KiB | % of baseline bytes | SSIM yuv Y | SSIM yuv All | SSIM rgb | photos >= baseline (yuv All) | encode CPU ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i, s := range settings {
		pt, cpu := "", "n/a (vips process)"
		if s.codec == flex.CodecHEIC {
			pt = s.group()
		}
		if !s.vips {
			cpu = fmt.Sprintf("%.0f", res[i].cpu.Seconds()/fn*1000)
		}
		fmt.Fprintf(&sb, "| %s | %d | %s | %.1f | %.0f%% | %.4f | %.4f | %.4f | %d/%d | %s |\n", s.name, s.q, pt,
			float64(res[i].bytes)/fn/1024, 100*float64(res[i].bytes)/float64(res[0].bytes),
			res[i].yY/fn, res[i].yAll/fn, res[i].rgb/fn, res[i].atLeastBaseline, n, cpu)
	}
	// The quality at which each HEIC group (same preset, tune and x265
	// parameters, qualities rising) matches the baseline's mean yuv All
	// SSIM, interpolated linearly between sweep points.
	baseSSIM := res[0].yAll / fn
	last := map[string]int{}
	done := map[string]bool{}
	for i, s := range settings {
		g := s.group()
		if s.codec != flex.CodecHEIC || done[g] {
			continue
		}
		prev, seen := last[g]
		last[g] = i
		if cur := res[i].yAll / fn; cur >= baseSSIM {
			done[g] = true
			q, by := float64(s.q), float64(res[i].bytes)
			if seen {
				ps := res[prev].yAll / fn
				t := (baseSSIM - ps) / (cur - ps)
				q = float64(settings[prev].q) + t*float64(s.q-settings[prev].q)
				by = float64(res[prev].bytes) + t*float64(res[i].bytes-res[prev].bytes)
			}
			fmt.Fprintf(&sb, "\nHEIC %s matches the baseline's SSIM (yuv All %.4f) at quality %.1f: %.1f KiB, %.0f%% of the baseline's bytes\n",
				g, baseSSIM, q, by/fn/1024, 100*by/float64(res[0].bytes))
			if s.preset == compress.DefaultHEICPreset && s.x265 == nil {
				b.ReportMetric(q, "heic-q-at-equal-ssim")
				b.ReportMetric(100*by/float64(res[0].bytes), "heic-%bytes-at-equal-ssim")
			}
		}
	}
	fmt.Println(sb.String())
}

type heicSetting struct {
	name   string
	codec  flex.ImageCodec
	q      int
	preset string
	tune   string
	x265   []string // nil: compress.DefaultHEICX265
	vips   bool
}

// group names a HEIC setting without its quality: preset / tune, and the
// x265 parameters when set.
func (s heicSetting) group() string {
	g := s.preset + " / " + s.tune
	if len(s.x265) > 0 {
		g += " " + strings.Join(s.x265, " ")
	}
	return g
}

var ssimYAllRe = regexp.MustCompile(`SSIM Y:([0-9.]+) .* All:([0-9.]+)`)

// ssimYUV compares a raw 4:2:0 source (declared as pixfmt, w x h) with a
// file ffmpeg decodes to the same pixel format, so no conversion is
// inserted: ffmpeg's SSIM Y and All.
func ssimYUV(tb testing.TB, refRaw, pixfmt string, w, h int, dist string) (y, all float64) {
	out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-v", "verbose", "-f", "rawvideo", "-pix_fmt", pixfmt,
		"-s", fmt.Sprintf("%dx%d", w, h), "-i", refRaw, "-i", dist,
		"-lavfi", "[0:v][1:v]ssim", "-f", "null", "-").CombinedOutput()
	if err != nil {
		tb.Fatalf("ffmpeg ssim: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "auto_scale") || strings.Contains(string(out), "auto-inserting") {
		tb.Fatalf("ffmpeg converted a side before SSIM:\n%s", out)
	}
	m := ssimYAllRe.FindSubmatch(out)
	if m == nil {
		tb.Fatalf("no SSIM in ffmpeg output:\n%s", out)
	}
	y, _ = strconv.ParseFloat(string(m[1]), 64)
	all, _ = strconv.ParseFloat(string(m[2]), 64)
	return y, all
}

func run(tb testing.TB, name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
