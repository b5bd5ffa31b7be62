package compress

import (
	"errors"
	"io"

	"willow/limits"
	"willow/mediaheader"
)

// Format is the container of an input image.
type Format = mediaheader.Format

// Input formats CheckHeader recognises.
const (
	FormatJPEG = mediaheader.FormatJPEG
	FormatPNG  = mediaheader.FormatPNG
	FormatHEIC = mediaheader.FormatHEIC
)

// Errors. Callers test them with errors.Is; the server turns them into gRPC
// statuses with the reasons named in the package doc.
var (
	ErrPixelBomb     = mediaheader.ErrPixelBomb
	ErrCorrupt       = mediaheader.ErrCorrupt
	ErrUnsupported   = mediaheader.ErrUnsupported
	ErrTooLarge      = errors.New("media over the size limit")
	ErrTooLong       = errors.New("video over the duration limit")
	ErrSourceMissing = errors.New("source object missing")
	ErrOverload      = errors.New("compress worker overloaded")
)

// CheckHeader is mediaheader.Check with maxPixels <= 0 meaning
// limits.DefaultMaxPixels.
func CheckHeader(r io.Reader, maxPixels int64) (Format, int, int, error) {
	if maxPixels <= 0 {
		maxPixels = limits.DefaultMaxPixels
	}
	return mediaheader.Check(r, maxPixels)
}
