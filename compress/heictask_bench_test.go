package compress_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"willow/compress"
	"willow/flex"
)

// taskSetting is one HEIC setting of BenchmarkHEICTask, parsed from
// WILLOW_BENCH_HEIC: whitespace-separated tokens, the x265 preset first,
// then "qN" (quality), "thumbjpeg=Q" (the thumb as JPEG qQ) and x265 parameters "name=value".
type taskSetting struct {
	name string
	opt  compress.ImageOptions
}

func parseTaskSettings(tb testing.TB, spec string) []taskSetting {
	var out []taskSetting
	for _, s := range strings.Split(spec, ";") {
		f := strings.Fields(s)
		if len(f) == 0 {
			continue
		}
		o := compress.ImageOptions{Codec: flex.CodecHEIC, Quality: defaultQuality(), HEICPreset: f[0]}
		for _, t := range f[1:] {
			switch {
			case strings.HasPrefix(t, "q"):
				q, err := strconv.Atoi(t[1:])
				if err != nil {
					tb.Fatalf("setting %q: bad quality %q", s, t)
				}
				o.Quality = q
			case strings.HasPrefix(t, "thumbjpeg="):
				q, err := strconv.Atoi(strings.TrimPrefix(t, "thumbjpeg="))
				if err != nil {
					tb.Fatalf("setting %q: bad thumb quality %q", s, t)
				}
				o.HEICThumbJPEG = q
			case strings.Contains(t, "="):
				o.HEICX265 = append(o.HEICX265, t)
			default:
				tb.Fatalf("setting %q: unknown token %q", s, t)
			}
		}
		if o.HEICX265 == nil {
			o.HEICX265 = []string{}
		}
		out = append(out, taskSetting{strings.Join(f, " "), o})
	}
	return out
}

// BenchmarkHEICTask measures the whole compress task of a photo (decode,
// resize, all three renditions, encode: compress.Images on the raw file)
// in process CPU time (getrusage: user + system, x265's threads included),
// for JPEG q50 (the flex path) and HEIC settings, alternating photo by
// photo, over several passes of the corpus. It prints, per setting, the
// median over passes of the CPU per photo, its ratio to JPEG q50's in the
// same pass (median), the wall time per photo and the KiB per rendition.
//
// WILLOW_BENCH_HEIC lists the HEIC settings ("fast q50; veryfast q55
// pools=1"; default: the shipped one), WILLOW_BENCH_PASSES the passes
// (default 3), WILLOW_BENCH_PHOTOS=N limits the corpus to its first N.
func BenchmarkHEICTask(b *testing.B) {
	paths := photos(b)
	if n, err := strconv.Atoi(os.Getenv("WILLOW_BENCH_PHOTOS")); err == nil && n > 0 && n < len(paths) {
		paths = paths[:n]
	}
	passes := 3
	if n, err := strconv.Atoi(os.Getenv("WILLOW_BENCH_PASSES")); err == nil && n > 0 {
		passes = n
	}
	spec := os.Getenv("WILLOW_BENCH_HEIC")
	if spec == "" {
		spec = compress.DefaultHEICPreset + " q" + strconv.Itoa(defaultQuality())
	}
	settings := append([]taskSetting{{"jpeg q50 (flex)", compress.ImageOptions{Codec: flex.CodecJPEG, Quality: 50}}},
		parseTaskSettings(b, spec)...)
	raws := make([][]byte, len(paths))
	for i, p := range paths {
		var err error
		if raws[i], err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
	type pass struct{ cpu, wall time.Duration }
	res := make([][]pass, len(settings))
	kib := make([][3]float64, len(settings))
	for b.Loop() {
		for p := 0; p < passes; p++ {
			cur := make([]pass, len(settings))
			for i, raw := range raws {
				line := make([]string, len(settings))
				for k := range settings {
					// Rotate the order photo by photo so no setting always
					// follows the same one.
					k = (k + i + p) % len(settings)
					c0, w0 := cpuNow(), time.Now()
					outs, err := compress.Images(context.Background(), raw, settings[k].opt)
					cpu := cpuNow() - c0
					cur[k].cpu += cpu
					cur[k].wall += time.Since(w0)
					line[k] = fmt.Sprintf("%s %.3f s", settings[k].name, cpu.Seconds())
					if err != nil {
						b.Fatalf("%s %s: %v", paths[i], settings[k].name, err)
					}
					if p == 0 {
						for j, o := range outs {
							kib[k][j] += float64(len(o.Data)) / 1024
						}
					}
				}
				// Progress on stderr, per photo: a run cut short still says something.
				fmt.Fprintf(os.Stderr, "pass %d %s: %s\n", p+1, filepath.Base(paths[i]), strings.Join(line, "; "))
			}
			for k := range settings {
				res[k] = append(res[k], cur[k])
			}
			fmt.Fprintf(os.Stderr, "pass %d:", p+1)
			for k := range settings {
				fmt.Fprintf(os.Stderr, " %s %.3f s;", settings[k].name, cur[k].cpu.Seconds()/float64(len(raws)))
			}
			fmt.Fprintln(os.Stderr)
		}
	}
	b.StopTimer()
	n := float64(len(raws))
	median := func(v []float64) float64 {
		sort.Float64s(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nwhole photo task (compress.Images: decode, resize, 3 renditions), %d photos, %d passes alternating, medians over passes; CPU = process user+system\n\n", len(raws), len(res[0]))
	sb.WriteString("| setting | CPU s/photo | x JPEG q50 CPU | wall s/photo | KiB L / M / T |\n|---|---|---|---|---|\n")
	for k, s := range settings {
		var cpu, ratio, wall []float64
		for p := range res[k] {
			cpu = append(cpu, res[k][p].cpu.Seconds()/n)
			ratio = append(ratio, res[k][p].cpu.Seconds()/res[0][p].cpu.Seconds())
			wall = append(wall, res[k][p].wall.Seconds()/n)
		}
		fmt.Fprintf(&sb, "| %s | %.3f | %.2f | %.3f | %.1f / %.1f / %.1f |\n", s.name, median(cpu), median(ratio), median(wall),
			kib[k][0]/n, kib[k][1]/n, kib[k][2]/n)
	}
	fmt.Println(sb.String())
}
