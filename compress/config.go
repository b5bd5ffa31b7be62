package compress

import (
	"log/slog"
	"runtime"
	"time"

	"willow/flex"
	"willow/limits"
	"willow/node"
	"willow/store"
)

// Defaults. Pool sizing rule (DESIGN.md section 2, docs/compress.md):
//
//	Workers            = cores (tasks are CPU-bound; ffmpeg threads inside one task, x265 does not)
//	Workers + QueueLen = peak tasks/s x seconds per task + headroom
//	                     (Little's law: the tasks inside the box at peak),
//	                     capped so that QueueLen / Workers x seconds per task < TaskTimeout
//
// Measured here (BENCHMARKS.md "HEIC normal path cost", BenchmarkHEICTask:
// the whole task, 19 photos, alternating, median of 3 passes): 0.91 s CPU per photo on HEIC
// q50 (x265 ultrafast, one encoder thread per task), 0.27 s on the JPEG
// q50 flex path, and 12-13 s of ffmpeg CPU for a 20 s video. One 2-core
// box therefore does about 2 HEIC photo tasks/s and about 7 JPEG ones.
// QueueLen 8 covers a burst of a few seconds of arrivals; a queued task
// then waits at most 8 / 2 x 1 s ≈ 4 s on HEIC (≈ 1.1 s on JPEG), well
// inside TaskTimeout. Anything beyond is shed with RESOURCE_EXHAUSTED and
// retried by the upload front from its durable record, which is cheaper
// than letting tasks time out in the queue.
const (
	DefaultQueueLen     = 8
	DefaultTaskTimeout  = 2 * time.Minute
	DefaultRetryAfter   = 5 * time.Second
	DefaultStoreTimeout = 30 * time.Second
	// DefaultHEICPreset is the x265 preset libheif encodes with: ultrafast
	// (was fast), with one encoder thread (DefaultHEICX265). Chosen by
	// BenchmarkHEICTask (whole photo task CPU against JPEG q50) and
	// BenchmarkHEICvsJPEG (bytes at equal SSIM against a libjpeg-turbo
	// JPEG q85); the sweep is in BENCHMARKS.md and docs/compress.md.
	DefaultHEICPreset = "ultrafast"
	// DefaultHEICTune is the x265 tune: ssim (also libheif's own default),
	// the fair one when the quality is chosen by SSIM (BenchmarkHEICvsJPEG).
	DefaultHEICTune = "ssim"
	// DefaultHEICThumbJPEG: the thumb of a HEIC task is HEIC (negative), or
	// JPEG at this quality (positive).
	DefaultHEICThumbJPEG = -1
	// DefaultX264Preset is the libx264 preset of video transcodes.
	DefaultX264Preset = "veryfast"
	// MaxVideoLongEdge is the long edge of the video variant.
	MaxVideoLongEdge = 1280
)

// DefaultHEICX265 are the x265 parameters set besides preset and tune.
// pools=none: x265 encodes on the calling thread, with no thread pool.
// Tasks run Workers = cores at a time, so process parallelism keeps the
// cores busy, and a single-threaded encode spends less CPU per photo than
// x265's own threads (BenchmarkHEICTask).
var DefaultHEICX265 = []string{"pools=none"}

const (
	defaultImageQuality = flex.DefaultImageQuality
	defaultVideoKbps    = flex.DefaultVideoBitrateKbps
)

// DefaultWorkers is the worker count when Config.Workers is zero: the
// number of usable cores.
func DefaultWorkers() int { return runtime.GOMAXPROCS(0) }

// Config configures a Server. Zero values mean the documented defaults.
// The yaml tags are the keys of the compress: section of cmd/compress's
// config file; the fields tagged "-" are set by code (Limits from the
// file's limits: section, which the upload fronts share).
type Config struct {
	// Workers is how many tasks run at once; default DefaultWorkers().
	Workers int `yaml:"workers"`
	// QueueLen is how many tasks may wait for a worker; default
	// DefaultQueueLen. Negative means no queue (0 is the default).
	QueueLen int `yaml:"queue_len"`
	// TaskTimeout caps a task's life (queue + work) when the caller's
	// deadline is later or absent; default DefaultTaskTimeout.
	TaskTimeout time.Duration `yaml:"task_timeout"`
	// Limits bound raw inputs (bytes), images and video frames (pixels);
	// they are the upload front's limits, from the same config (package
	// limits); zero fields mean the limits defaults.
	Limits limits.Limits `yaml:"-"`
	// TempDir holds ffmpeg's per-task directories; default os.TempDir().
	TempDir string `yaml:"temp_dir"`
	// HEICPreset is the x265 preset; default DefaultHEICPreset.
	HEICPreset string `yaml:"heic_preset"`
	// X264Preset is the libx264 preset; default DefaultX264Preset.
	X264Preset string `yaml:"x264_preset"`
	// FFmpeg and FFprobe are the binaries; default "ffmpeg", "ffprobe".
	FFmpeg  string `yaml:"ffmpeg"`
	FFprobe string `yaml:"ffprobe"`
	// RetryAfter is the hint sent with overload errors; default
	// DefaultRetryAfter.
	RetryAfter time.Duration `yaml:"retry_after"`
	// StoreTimeout bounds each store call; default DefaultStoreTimeout.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// Logger; default the node's logger.
	Logger *slog.Logger `yaml:"-"`
	// Now; default time.Now.
	Now func() time.Time `yaml:"-"`
}

// Deps are the Server's collaborators.
type Deps struct {
	// Node is the runtime the server registers on and takes knobs from.
	Node *node.Node
	// Store holds raw uploads and receives variants.
	Store store.Store
}
