package mediaheader

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// maxBoxDepth bounds the nesting VideoDuration follows.
const maxBoxDepth = 4

// VideoDuration reads a video's duration from its container header alone,
// never decoding a frame: the movie header (moov/mvhd) of an ISO base media
// file (MP4, MOV, 3GP; moov may come before or after mdat, so r must reach
// the whole file), or the main AVI header (avih) of a RIFF AVI. It returns
// ErrUnsupported (wrapped) for other containers, whose duration the
// compress worker learns from ffprobe, and ErrCorrupt for a header it
// cannot parse.
func VideoDuration(r io.ReaderAt, size int64) (time.Duration, error) {
	var head [12]byte
	if n, _ := r.ReadAt(head[:], 0); n < 12 {
		return 0, fmt.Errorf("video header: %w", ErrCorrupt)
	}
	switch {
	case string(head[4:8]) == "ftyp" || string(head[4:8]) == "moov" || string(head[4:8]) == "mdat" ||
		string(head[4:8]) == "wide" || string(head[4:8]) == "free":
		return mp4Duration(r, 0, size, 0)
	case string(head[0:4]) == "RIFF" && string(head[8:12]) == "AVI ":
		return aviDuration(r, size)
	}
	return 0, fmt.Errorf("video container: %w", ErrUnsupported)
}

// mp4Duration walks the boxes in [off, end) looking for moov/mvhd.
func mp4Duration(r io.ReaderAt, off, end int64, depth int) (time.Duration, error) {
	var h [16]byte
	for off+8 <= end {
		if _, err := r.ReadAt(h[:8], off); err != nil {
			return 0, fmt.Errorf("mp4 box at %d: %w", off, ErrCorrupt)
		}
		size, typ, hdr := int64(binary.BigEndian.Uint32(h[:4])), string(h[4:8]), int64(8)
		switch size {
		case 0: // to the end of the file
			size = end - off
		case 1: // 64-bit size
			if _, err := r.ReadAt(h[8:16], off+8); err != nil {
				return 0, fmt.Errorf("mp4 box at %d: %w", off, ErrCorrupt)
			}
			size, hdr = int64(binary.BigEndian.Uint64(h[8:16])), 16
		}
		if size < hdr || off+size > end {
			return 0, fmt.Errorf("mp4 box %q at %d: size %d: %w", typ, off, size, ErrCorrupt)
		}
		switch typ {
		case "moov":
			if depth >= maxBoxDepth {
				return 0, fmt.Errorf("mp4: boxes nested too deep: %w", ErrCorrupt)
			}
			return mp4Duration(r, off+hdr, off+size, depth+1)
		case "mvhd":
			return mvhd(r, off+hdr, size-hdr)
		}
		off += size
	}
	return 0, fmt.Errorf("mp4: no movie header: %w", ErrCorrupt)
}

// mvhd parses a movie header box body.
func mvhd(r io.ReaderAt, off, n int64) (time.Duration, error) {
	var b [32]byte
	if n < 20 {
		return 0, fmt.Errorf("mvhd: %d bytes: %w", n, ErrCorrupt)
	}
	k := min(n, int64(len(b)))
	if _, err := r.ReadAt(b[:k], off); err != nil {
		return 0, fmt.Errorf("mvhd: %w", ErrCorrupt)
	}
	var scale, dur uint64
	switch b[0] {
	case 0:
		scale, dur = uint64(binary.BigEndian.Uint32(b[12:16])), uint64(binary.BigEndian.Uint32(b[16:20]))
	case 1:
		if k < 32 {
			return 0, fmt.Errorf("mvhd v1: %d bytes: %w", n, ErrCorrupt)
		}
		scale, dur = uint64(binary.BigEndian.Uint32(b[20:24])), binary.BigEndian.Uint64(b[24:32])
	default:
		return 0, fmt.Errorf("mvhd version %d: %w", b[0], ErrCorrupt)
	}
	if scale == 0 {
		return 0, fmt.Errorf("mvhd: zero timescale: %w", ErrCorrupt)
	}
	return seconds(float64(dur) / float64(scale)), nil
}

// aviDuration reads dwMicroSecPerFrame x dwTotalFrames from the avih chunk
// of RIFF AVI's hdrl list.
func aviDuration(r io.ReaderAt, size int64) (time.Duration, error) {
	var b [64]byte
	n, _ := r.ReadAt(b[:], 12)
	// LIST size "hdrl" "avih" size body...
	if n < 44 || string(b[0:4]) != "LIST" || string(b[8:12]) != "hdrl" || string(b[12:16]) != "avih" {
		return 0, fmt.Errorf("avi: no main header: %w", ErrCorrupt)
	}
	body := b[20:]
	usPerFrame := binary.LittleEndian.Uint32(body[0:4])
	frames := binary.LittleEndian.Uint32(body[16:20])
	return seconds(float64(usPerFrame) * float64(frames) / 1e6), nil
}

// seconds converts, saturating instead of overflowing.
func seconds(s float64) time.Duration {
	if s >= float64(1<<62)/float64(time.Second) {
		return time.Duration(1 << 62)
	}
	return time.Duration(s * float64(time.Second))
}
