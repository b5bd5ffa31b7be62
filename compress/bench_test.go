package compress_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"willow/compress"
	"willow/flex"
	"willow/media"
)

// cpuNow is the process's user+system CPU time (x265 threads included).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func photos(tb testing.TB) []string {
	ps, err := filepath.Glob(filepath.Join(sharedPhotos, "*"))
	if err != nil || len(ps) == 0 {
		tb.Fatalf("no photos in %s: %v", sharedPhotos, err)
	}
	sort.Strings(ps)
	return ps
}

// decodePhoto reads and decodes the corpus photo at path.
func decodePhoto(tb testing.TB, path string) image.Image {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	img, err := compress.DecodeImage(raw, 0)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return img
}

var ssimRe = regexp.MustCompile(`All:([0-9.]+)`)

// ssim runs ffmpeg's ssim filter on a reference and a distorted image of
// the same size (files ffmpeg can read).
func ssim(tb testing.TB, ref, dist string) float64 {
	out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-i", ref, "-i", dist,
		"-lavfi", "[0:v][1:v]ssim", "-f", "null", "-").CombinedOutput()
	if err != nil {
		tb.Fatalf("ffmpeg ssim: %v\n%s", err, out)
	}
	m := ssimRe.FindSubmatch(out)
	if m == nil {
		tb.Fatalf("no SSIM in ffmpeg output:\n%s", out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func writePNG(tb testing.TB, path string, img image.Image) {
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// ssimOf decodes an encoded variant (HEIC through libheif, JPEG as is) and
// compares it with its reference PNG.
func ssimOf(tb testing.TB, dir string, ref string, o compress.Output) float64 {
	dist := filepath.Join(dir, "dist.png")
	img, err := compress.DecodeImage(o.Data, 0)
	if err != nil {
		tb.Fatal(err)
	}
	writePNG(tb, dist, img)
	return ssim(tb, ref, dist)
}

type agg struct {
	cpu   time.Duration
	bytes [3]int64
	ssim  [3]float64
	n     int
}

func (a *agg) row(name string) string {
	n := float64(a.n)
	return fmt.Sprintf("| %s | %.3f | %.1f / %.1f / %.1f | %.1f | %.4f / %.4f / %.4f |", name,
		a.cpu.Seconds()/n, float64(a.bytes[0])/n/1024, float64(a.bytes[1])/n/1024, float64(a.bytes[2])/n/1024,
		float64(a.bytes[0]+a.bytes[1]+a.bytes[2])/n/1024, a.ssim[0]/n, a.ssim[1]/n, a.ssim[2]/n)
}

// BenchmarkPhotos runs every shared photo through the HEIC path (at the
// shipped quality and at 70), the JPEG q50 flex path and vipsthumbnail
// making the same three JPEG q50 sizes, and prints a markdown table: CPU
// seconds per photo (all presets, decode included), KiB per preset and
// SSIM per preset against the resized source.
func BenchmarkPhotos(b *testing.B) {
	paths := photos(b)
	dir := b.TempDir()
	shipped := compress.ImageOptions{Codec: flex.CodecHEIC, Quality: defaultQuality()}
	runs := []struct {
		name string
		opt  compress.ImageOptions
	}{
		{fmt.Sprintf("heic q%d (shipped)", shipped.Quality), shipped},
		{"heic q70", compress.ImageOptions{Codec: flex.CodecHEIC, Quality: 70}},
		{"jpeg q50 (flex)", compress.ImageOptions{Codec: flex.CodecJPEG, Quality: 50}},
	}
	if shipped.Quality == 70 {
		runs = runs[1:]
	}
	res := make([]agg, len(runs)+1)
	for b.Loop() {
		for _, p := range paths {
			raw, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			src, err := compress.DecodeImage(raw, 0)
			if err != nil {
				b.Fatal(err)
			}
			refs := make([]string, len(compress.Presets))
			for i, r := range compress.Renditions(src) {
				refs[i] = filepath.Join(dir, fmt.Sprintf("ref-%d.png", i))
				writePNG(b, refs[i], r)
			}
			src = nil
			for k, r := range runs {
				c0 := cpuNow()
				outs, err := compress.Images(context.Background(), raw, r.opt)
				res[k].cpu += cpuNow() - c0
				if err != nil {
					b.Fatal(err)
				}
				for i, o := range outs {
					res[k].bytes[i] += int64(len(o.Data))
					res[k].ssim[i] += ssimOf(b, dir, refs[i], o)
				}
				res[k].n++
			}
			// vipsthumbnail: same long edges, JPEG q50, metadata stripped.
			v := &res[len(runs)]
			for i, pr := range compress.Presets {
				out := filepath.Join(dir, fmt.Sprintf("vips-%d.jpg", i))
				cmd := exec.Command("vipsthumbnail", p, "--size", fmt.Sprintf("%dx%d>", pr.LongEdge, pr.LongEdge),
					"-o", out+"[Q=50,strip]")
				if b2, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("vipsthumbnail: %v\n%s", err, b2)
				}
				v.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				st, _ := os.Stat(out)
				v.bytes[i] += st.Size()
				// Decoded to RGB like every other column (ffmpeg would otherwise
				// compare in the JPEG's subsampled YUV and flatter it); when
				// vips rounds a dimension differently the reference is
				// rescaled to its size.
				data, err := os.ReadFile(out)
				if err != nil {
					b.Fatal(err)
				}
				ref := refs[i]
				if cfg, rc := imageConfig(b, out), imageConfig(b, ref); cfg.Width != rc.Width || cfg.Height != rc.Height {
					ref = scaleTo(b, dir, ref, cfg)
				}
				v.ssim[i] += ssimOf(b, dir, ref, compress.Output{Data: data})
			}
			v.n++
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d photos, per photo: CPU s (decode + 3 presets), KiB large / medium / thumb, total KiB, SSIM large / medium / thumb\n\n", len(paths))
	sb.WriteString("| path | CPU s/photo | KiB L / M / T | KiB total | SSIM L / M / T |\n|---|---|---|---|---|\n")
	for k, r := range runs {
		sb.WriteString(res[k].row(r.name) + "\n")
	}
	sb.WriteString(res[len(runs)].row("vipsthumbnail jpeg q50 (3 runs)") + "\n")
	jpeg, heic70, vips := res[len(runs)-1], res[len(runs)-2], res[len(runs)]
	fmt.Fprintf(&sb, "\njpeg q50 CPU / heic q70 CPU = %.2f (goal <= 0.20)\n", jpeg.cpu.Seconds()/heic70.cpu.Seconds())
	if len(runs) == 3 {
		fmt.Fprintf(&sb, "jpeg q50 CPU / heic q%d CPU = %.2f\n", shipped.Quality, jpeg.cpu.Seconds()/res[0].cpu.Seconds())
	}
	fmt.Fprintf(&sb, "jpeg q50 CPU / vipsthumbnail CPU = %.2f (goal <= 2.0)\n", jpeg.cpu.Seconds()/vips.cpu.Seconds())
	fmt.Println(sb.String())
	b.ReportMetric(jpeg.cpu.Seconds()/float64(jpeg.n), "jpeg-cpu-s/photo")
	b.ReportMetric(heic70.cpu.Seconds()/float64(heic70.n), "heic70-cpu-s/photo")
}

func imageConfig(tb testing.TB, p string) image.Config {
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	c, _, err := image.DecodeConfig(f)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// scaleTo makes a copy of ref at cfg's size (for SSIM of vips outputs that
// round a dimension differently).
func scaleTo(tb testing.TB, dir, ref string, cfg image.Config) string {
	out := filepath.Join(dir, "ref-scaled.png")
	b, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-y", "-i", ref, "-vf",
		fmt.Sprintf("scale=%d:%d:flags=lanczos", cfg.Width, cfg.Height), out).CombinedOutput()
	if err != nil {
		tb.Fatalf("scale ref: %v\n%s", err, b)
	}
	return out
}

// BenchmarkHEICQuality sweeps HEIC quality against JPEG on the medium
// (1080) rendition of every photo: mean KiB and SSIM per setting. The
// shipped HEIC quality is the lowest one whose SSIM is at least JPEG q85's
// (a normal JPEG setting) while clearly smaller.
func BenchmarkHEICQuality(b *testing.B) {
	paths := everyOther(photos(b))
	dir := b.TempDir()
	type setting struct {
		codec flex.ImageCodec
		q     int
	}
	settings := []setting{{"heic", 30}, {"heic", 40}, {"heic", 50}, {"heic", 55}, {"heic", 60}, {"heic", 70},
		{"jpeg", 50}, {"jpeg", 70}, {"jpeg", 85}}
	bytesOf := make([]int64, len(settings))
	ssimOfS := make([]float64, len(settings))
	cpuOf := make([]time.Duration, len(settings))
	for b.Loop() {
		for _, p := range paths {
			src := decodePhoto(b, p)
			med := compress.Renditions(src)[1]
			ref := filepath.Join(dir, "ref.png")
			writePNG(b, ref, med)
			for i, s := range settings {
				c0 := cpuNow()
				o, err := compress.Encode(med, media.VariantMedium, compress.ImageOptions{Codec: s.codec, Quality: s.q})
				cpuOf[i] += cpuNow() - c0
				if err != nil {
					b.Fatal(err)
				}
				bytesOf[i] += int64(len(o.Data))
				ssimOfS[i] += ssimOf(b, dir, ref, o)
			}
		}
	}
	b.StopTimer()
	n := float64(len(paths))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nmedium (1080) rendition, mean over %d photos, x265 preset %s\n\n| codec | quality | KiB | SSIM | encode CPU ms |\n|---|---|---|---|---|\n", len(paths), compress.DefaultHEICPreset)
	ref85 := -1
	for i, s := range settings {
		fmt.Fprintf(&sb, "| %s | %d | %.1f | %.4f | %.0f |\n", s.codec, s.q, float64(bytesOf[i])/n/1024, ssimOfS[i]/n, cpuOf[i].Seconds()/n*1000)
		if s.codec == "jpeg" && s.q == 85 {
			ref85 = i
		}
	}
	for i, s := range settings {
		if s.codec == "heic" && ssimOfS[i] >= ssimOfS[ref85] {
			fmt.Fprintf(&sb, "\nlowest heic quality with SSIM >= jpeg q85: %d (%.0f%% of jpeg q85's bytes)\n", s.q, 100*float64(bytesOf[i])/float64(bytesOf[ref85]))
			break
		}
	}
	fmt.Println(sb.String())
}

// BenchmarkHEICPreset measures x265 presets on the large rendition of a
// few photos: at the shipped quality, and ultrafast a notch higher so the
// comparison is at about equal SSIM.
func BenchmarkHEICPreset(b *testing.B) {
	paths := everyOther(photos(b))[:5]
	dir := b.TempDir()
	q := defaultQuality()
	type setting struct {
		preset string
		q      int
	}
	settings := []setting{{"ultrafast", q}, {"ultrafast", q + 5}, {"ultrafast", q + 10}, {"superfast", q}, {"fast", q}, {"medium", q}}
	bytesOf := make([]int64, len(settings))
	ssimOfP := make([]float64, len(settings))
	cpuOf := make([]time.Duration, len(settings))
	for b.Loop() {
		for _, p := range paths {
			src := decodePhoto(b, p)
			large := compress.Renditions(src)[0]
			ref := filepath.Join(dir, "ref.png")
			writePNG(b, ref, large)
			for i, st := range settings {
				c0 := cpuNow()
				o, err := compress.Encode(large, media.VariantLarge, compress.ImageOptions{Codec: flex.CodecHEIC, Quality: st.q, HEICPreset: st.preset})
				cpuOf[i] += cpuNow() - c0
				if err != nil {
					b.Fatal(err)
				}
				bytesOf[i] += int64(len(o.Data))
				ssimOfP[i] += ssimOf(b, dir, ref, o)
			}
		}
	}
	b.StopTimer()
	n := float64(len(paths))
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nlarge (1920) rendition, mean over %d photos\n\n| x265 preset | quality | KiB | SSIM | encode CPU ms |\n|---|---|---|---|---|\n", len(paths))
	for i, st := range settings {
		fmt.Fprintf(&sb, "| %s | %d | %.1f | %.4f | %.0f |\n", st.preset, st.q, float64(bytesOf[i])/n/1024, ssimOfP[i]/n, cpuOf[i].Seconds()/n*1000)
	}
	fmt.Println(sb.String())
}

// everyOther keeps half the photos, to bound the sweeps' run time.
func everyOther(ps []string) []string {
	var out []string
	for i := 0; i < len(ps); i += 2 {
		out = append(out, ps[i])
	}
	return out
}

// BenchmarkVideo transcodes a 20 s 1080p clip from ffmpeg's test sources
// (testsrc2 with temporal noise, so the encoder needs its bits) at the
// normal and the flex bitrate: size, CPU, probed bitrate.
func BenchmarkVideo(b *testing.B) {
	src := filepath.Join(b.TempDir(), "src.mp4")
	ffmpeg(b, "-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=30:duration=20", "-vf", "noise=alls=8:allf=t",
		"-c:v", "libx264", "-preset", "ultrafast", "-crf", "26", "-pix_fmt", "yuv420p", src)
	type row struct {
		kbps  int
		bytes int64
		cpu   time.Duration
		got   float64
		dur   float64
	}
	rows := []row{{kbps: 1800}, {kbps: 1200}}
	for b.Loop() {
		for i := range rows {
			f, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			res, err := compress.Video(context.Background(), f, compress.VideoOptions{BitrateKbps: rows[i].kbps, TempDir: b.TempDir()})
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			rows[i].bytes = int64(len(res.Outputs[0].Data))
			rows[i].cpu = res.CPU
			rows[i].got = res.OutputKbps
			rows[i].dur = res.OutputSeconds
		}
	}
	b.StopTimer()
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n20 s 1920x1080 testsrc2+noise -> 1280x720 H.264 (x264 %s), ffmpeg CPU\n\n| target kbps | MiB | probed kbps | duration s | CPU s |\n|---|---|---|---|---|\n", compress.DefaultX264Preset)
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %d | %.2f | %.0f | %.2f | %.1f |\n", r.kbps, float64(r.bytes)/(1<<20), r.got, r.dur, r.cpu.Seconds())
	}
	fmt.Fprintf(&sb, "\n1200 kbps size / 1800 kbps size = %.2f (goal <= 0.70)\n", float64(rows[1].bytes)/float64(rows[0].bytes))
	fmt.Println(sb.String())
}
