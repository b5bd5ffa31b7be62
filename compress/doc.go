// Package compress is Willow's compress worker: it turns one raw upload into
// the variants clients download.
//
// Images (JPEG, PNG, HEIC input) are checked by header first (mediaheader.Check
// rejects pixel bombs before a byte of pixel data is decoded), decoded,
// turned upright by their EXIF orientation, resized to the presets thumb,
// medium and large (long edge 240, 1080, 1920; never upscaled) and encoded
// without metadata as HEIC (libheif + x265 through cgo) or JPEG, as the live
// flex knobs say at the start of the task. Videos go through ffmpeg to MP4
// H.264 at the knob's bitrate plus a poster JPEG, checked with ffprobe.
//
// Guarantees:
//   - A knob change applies to the next task; a running task keeps the
//     knobs it started with.
//   - Work is bounded: at most Config.Workers tasks run and at most
//     Config.QueueLen wait; a task that cannot start before its deadline is
//     dropped with RESOURCE_EXHAUSTED reason "overload" and a retry-after,
//     and the upload front retries it from its durable record.
//   - Memory per image task is bounded by Config.Limits.MaxPixels (a 20 MP photo
//     stays well under 512 MiB, see TestMemoryBound).
//   - ffmpeg runs in its own process group, is killed with the group when
//     the task's deadline passes, and its temporary directory is removed.
//   - Errors reach gRPC callers once, at the server edge, as
//     INVALID_ARGUMENT pixel_bomb | corrupt_media | too_large |
//     unsupported_media, NOT_FOUND source_missing, or RESOURCE_EXHAUSTED
//     overload.
//
// The pipeline is also usable without gRPC: DecodeImage, Images and Video.
package compress
