package compress

/*
#include <malloc.h>

static int willow_mmap_threshold(int n) { return mallopt(M_MMAP_THRESHOLD, n); }

static void willow_mallinfo(size_t* in_use, size_t* free_bytes) {
	struct mallinfo2 mi = mallinfo2();
	*in_use = mi.uordblks + mi.hblkhd;
	*free_bytes = mi.fordblks;
}
*/
import "C"

import (
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MallocMmapThreshold is the size from which the C allocator (glibc
// malloc, used by libjpeg-turbo, libheif, libde265 and x265) serves an
// allocation with its own mmap, given back to the OS on free.
//
// glibc's default starts at 128 KiB but raises itself to the size of the
// largest block freed so far (up to 32 MiB). After the first photo, the
// decoders' multi-MiB pixel and coefficient buffers then come from
// malloc's arenas, up to one per thread that ever called into C (8 per
// core), and freed arena space that is not at an arena's top is never
// returned. A compress worker's RSS then climbed for as long as it ran:
// in the soak +53 MiB over the last half of a 3-minute run with Go's own
// memory flat, and 230 MiB of it still held when idle. With the threshold
// fixed at 1 MiB those buffers are mapped and unmapped per use, and C
// memory stays at about 20 MiB (docs/operations.md, "The soak").
const MallocMmapThreshold = 1 << 20

// The threshold is fixed as the package loads, before any codec runs, so
// no buffer freed under glibc's default policy is left in an arena.
func init() { tuneMalloc(os.Getenv) }

var mallocTuned struct {
	once sync.Once
	ok   bool
}

// tuneMalloc fixes the C allocator's mmap threshold at MallocMmapThreshold
// once per process, unless the environment already sets it
// (MALLOC_MMAP_THRESHOLD_, or mmap_threshold in GLIBC_TUNABLES: the
// operator's choice wins). It reports whether the threshold is fixed.
func tuneMalloc(getenv func(string) string) bool {
	mallocTuned.once.Do(func() {
		if getenv("MALLOC_MMAP_THRESHOLD_") != "" || strings.Contains(getenv("GLIBC_TUNABLES"), "mmap_threshold") {
			mallocTuned.ok = true // fixed by the environment, which also stops glibc's raising it
			return
		}
		mallocTuned.ok = C.willow_mmap_threshold(C.int(MallocMmapThreshold)) == 1
	})
	return mallocTuned.ok
}

// mallocBytes returns the C allocator's bytes in use (arena blocks in use
// plus mmapped blocks) and the free bytes it holds in its arenas.
func mallocBytes() (inUse, free float64) {
	var u, f C.size_t
	C.willow_mallinfo(&u, &f)
	return float64(u), float64(f)
}

// mallocCollectors are the gauges of the C allocator's memory:
// willow_compress_malloc_bytes{state="in_use"|"free"}.
func mallocCollectors() []prometheus.Collector {
	gauge := func(state string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "willow_compress_malloc_bytes",
			Help:        "C allocator (glibc malloc) memory of the codec libraries: in_use, or free but held in its arenas.",
			ConstLabels: prometheus.Labels{"state": state}}, v)
	}
	return []prometheus.Collector{
		gauge("in_use", func() float64 { u, _ := mallocBytes(); return u }),
		gauge("free", func() float64 { _, f := mallocBytes(); return f }),
	}
}
