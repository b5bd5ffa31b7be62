package upload

import (
	"errors"
	"io"
	"time"

	"willow/limits"
	"willow/mediaheader"
)

// checkDuration reads a video's duration from its container header (never
// a frame) and refuses one over the business's limit with INVALID_ARGUMENT
// limits.ReasonTooLong. A container the header reader does not know, or a header it
// cannot parse, is the compress worker's to judge: it checks the same
// limit with ffprobe and refuses for good.
func (s *Server) checkDuration(r io.ReaderAt, size int64, business string) error {
	d, err := mediaheader.VideoDuration(r, size)
	if err != nil {
		if !errors.Is(err, mediaheader.ErrUnsupported) && !errors.Is(err, mediaheader.ErrCorrupt) {
			s.log.Warn("upload: video header", "err", err)
		}
		return nil
	}
	if limit := s.cfg.Limits.VideoDuration(business); d > limit {
		return fail(limits.ReasonTooLong, "video is %s long, over the %s limit of business %s", d.Round(time.Millisecond), limit, business)
	}
	return nil
}
