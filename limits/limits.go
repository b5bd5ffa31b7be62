// Package limits declares the media limits of Willow in one place: the
// upload front enforces them before it acknowledges an upload and the
// compress worker enforces the same values before it decodes, so nothing
// the front accepts is refused later for a limit (DESIGN.md section 5,
// CONVENTIONS.md rule 13). Both services take a Limits in their Config,
// and both mains read it from the same top-level `limits:` section of
// their config file; deploy/local and `willow up` pass one value to both.
// A business's own video duration limit is a column of the business
// table (flex.Business.MaxVideoDuration), so a business is added in one
// place.
package limits

import (
	"fmt"
	"strings"
	"time"

	"willow/flex"
)

// Defaults of Limits.
const (
	// DefaultMaxImageBytes bounds a photo upload.
	DefaultMaxImageBytes = 30 << 20
	// DefaultMaxVideoBytes bounds a video upload.
	DefaultMaxVideoBytes = 200 << 20
	// DefaultMaxPixels bounds width x height of an image or a video frame
	// as its header states it: 40 MP, above the 12-24 MP binned output of
	// phone main cameras and below the 45-50 MP of full-resolution modes,
	// which the decoder would need gigabytes of memory for at a peak.
	DefaultMaxPixels = 40_000_000
	// DefaultMaxVideoDuration is the duration limit of a business with
	// none of its own (flex.Business.MaxVideoDuration, MaxVideoDuration).
	DefaultMaxVideoDuration = 5 * time.Minute
)

// Limits are the size, pixel and duration limits of media. The zero value
// of each field means its default.
type Limits struct {
	// MaxImageBytes and MaxVideoBytes bound an upload's size; defaults
	// DefaultMaxImageBytes, DefaultMaxVideoBytes.
	MaxImageBytes int64 `yaml:"max_image_bytes"`
	MaxVideoBytes int64 `yaml:"max_video_bytes"`
	// MaxPixels bounds width x height of an image (and of a video frame);
	// default DefaultMaxPixels.
	MaxPixels int64 `yaml:"max_pixels"`
	// MaxVideoDuration is the video duration limit per business, read
	// from the container header; a business not listed gets its own
	// default (flex.Business.MaxVideoDuration: moments 60 s), else
	// DefaultVideoDuration. A key that is not a business is an error.
	MaxVideoDuration map[string]time.Duration `yaml:"max_video_duration"`
	// DefaultVideoDuration is the limit of businesses not in
	// MaxVideoDuration; default DefaultMaxVideoDuration.
	DefaultVideoDuration time.Duration `yaml:"default_video_duration"`
}

// Default returns the default limits.
func Default() Limits { return Limits{}.WithDefaults() }

// WithDefaults returns l with every zero field set to its default. The
// duration map is copied, so the result can be changed freely.
func (l Limits) WithDefaults() Limits {
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = DefaultMaxImageBytes
	}
	if l.MaxVideoBytes <= 0 {
		l.MaxVideoBytes = DefaultMaxVideoBytes
	}
	if l.MaxPixels <= 0 {
		l.MaxPixels = DefaultMaxPixels
	}
	if l.DefaultVideoDuration <= 0 {
		l.DefaultVideoDuration = DefaultMaxVideoDuration
	}
	m := map[string]time.Duration{}
	for _, b := range flex.Businesses() {
		if b.MaxVideoDuration > 0 {
			m[b.Name] = b.MaxVideoDuration
		}
	}
	for b, d := range l.MaxVideoDuration {
		m[b] = d
	}
	l.MaxVideoDuration = m
	return l
}

// Validate reports a negative limit, and a video duration limit for a
// business the business table (package flex) does not have.
func (l Limits) Validate() error {
	if l.MaxImageBytes < 0 || l.MaxVideoBytes < 0 || l.MaxPixels < 0 || l.DefaultVideoDuration < 0 {
		return fmt.Errorf("limits: negative limit in %+v", l)
	}
	for b, d := range l.MaxVideoDuration {
		if !flex.KnownBusiness(b) {
			return fmt.Errorf("limits: max_video_duration names %q, not a business (known: %s)", b, strings.Join(flex.BusinessNames(), ", "))
		}
		if d < 0 {
			return fmt.Errorf("limits: negative video duration for %q", b)
		}
	}
	return nil
}

// VideoDuration returns the duration limit of business's videos.
func (l Limits) VideoDuration(business string) time.Duration {
	if d, ok := l.MaxVideoDuration[business]; ok && d > 0 {
		return d
	}
	if l.DefaultVideoDuration > 0 {
		return l.DefaultVideoDuration
	}
	return DefaultMaxVideoDuration
}
