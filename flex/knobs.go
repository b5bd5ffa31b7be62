package flex

import (
	"strconv"
	"strings"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// Knob names (DESIGN.md section 3). Per-business knobs are named
// ShedRatioPrefix + BUSINESS.
const (
	KnobRetries            = "retries"
	KnobImageCodec         = "image_codec"
	KnobImageQuality       = "image_quality"
	KnobVideoBitrateKbps   = "video_bitrate_kbps"
	KnobPool1              = "pool1"
	KnobPool2              = "pool2"
	KnobStoreWriteBudget   = "store_write_budget"
	KnobPool1DrainPerS     = "pool1_drain_per_s"
	KnobTimelineDelayRatio = "timeline_delay_ratio"
	KnobTimelineReleasePS  = "timeline_release_per_s"
	ShedRatioPrefix        = "shed_ratio."
)

// Knobs is the typed, effective view of the flex state for one node: the
// global knobs with the overrides of the node's scopes applied. The zero
// value is not meaningful; use Defaults or Effective.
type Knobs struct {
	Version             int64
	Level               string
	Retries             bool
	ImageCodec          string // heic | jpeg
	ImageQuality        int
	VideoBitrateKbps    int
	Pool1               string // off | auto | force
	Pool2               string // off | auto | force
	StoreWriteBudget    float64
	Pool1DrainPerS      float64
	TimelineDelayRatio  float64
	TimelineReleasePerS float64
	ShedRatio           map[string]float64 // by business
	ExpiresAt           time.Time
}

// Default knob values of the normal level.
const (
	DefaultImageCodec          = "heic"
	DefaultImageQuality        = 55 // chosen by the compress benchmark (BENCHMARKS.md, docs/compress.md)
	DefaultVideoBitrateKbps    = 1800
	DefaultStoreWriteBudget    = 200
	DefaultPool1DrainPerS      = 20
	DefaultTimelineReleasePerS = 200
)

// Defaults returns the knobs of the normal level.
func Defaults() Knobs {
	return Knobs{
		Level:               "normal",
		Retries:             true,
		ImageCodec:          DefaultImageCodec,
		ImageQuality:        DefaultImageQuality,
		VideoBitrateKbps:    DefaultVideoBitrateKbps,
		Pool1:               "auto",
		Pool2:               "auto",
		StoreWriteBudget:    DefaultStoreWriteBudget,
		Pool1DrainPerS:      DefaultPool1DrainPerS,
		TimelineReleasePerS: DefaultTimelineReleasePerS,
		ShedRatio:           map[string]float64{},
	}
}

// Effective returns the knobs a node in region and group runs: the global
// knobs of st, then the overrides of scope "region:REGION", then those of
// "group:GROUP". A nil st gives Defaults. Unparseable values keep the
// default (the master validates every change, so they do not occur).
func Effective(st *willowv1.FlexState, region, group string) Knobs {
	k := Defaults()
	if st == nil {
		return k
	}
	k.Version = st.GetVersion()
	if st.GetLevel() != "" {
		k.Level = st.GetLevel()
	}
	if ms := st.GetExpiresAtUnixMs(); ms > 0 {
		k.ExpiresAt = time.UnixMilli(ms)
	}
	k.apply(st.GetKnobs())
	for _, sc := range st.GetScopes() {
		if sc.GetScope() == "region:"+region || (group != "" && sc.GetScope() == "group:"+group) {
			if sc.GetLevel() != "" {
				k.Level = sc.GetLevel()
			}
			k.apply(sc.GetKnobs())
		}
	}
	return k
}

func (k *Knobs) apply(m map[string]string) {
	for name, v := range m {
		switch name {
		case KnobRetries:
			k.Retries = v == "on" || v == "true"
		case KnobImageCodec:
			k.ImageCodec = v
		case KnobImageQuality:
			setInt(&k.ImageQuality, v)
		case KnobVideoBitrateKbps:
			setInt(&k.VideoBitrateKbps, v)
		case KnobPool1:
			k.Pool1 = v
		case KnobPool2:
			k.Pool2 = v
		case KnobStoreWriteBudget:
			setFloat(&k.StoreWriteBudget, v)
		case KnobPool1DrainPerS:
			setFloat(&k.Pool1DrainPerS, v)
		case KnobTimelineDelayRatio:
			setFloat(&k.TimelineDelayRatio, v)
		case KnobTimelineReleasePS:
			setFloat(&k.TimelineReleasePerS, v)
		default:
			if b, ok := strings.CutPrefix(name, ShedRatioPrefix); ok {
				var f float64
				setFloat(&f, v)
				k.ShedRatio[b] = f
			}
		}
	}
}

func setInt(dst *int, v string) {
	if n, err := strconv.Atoi(v); err == nil {
		*dst = n
	}
}

func setFloat(dst *float64, v string) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*dst = f
	}
}
