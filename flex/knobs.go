package flex

import (
	"math"
	"slices"
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

// PoolMode is the value of the pool1 and pool2 knobs.
type PoolMode string

// Pool modes: off never uses the pool; auto uses it when the front is
// overloaded (pool 1) or over its store write budget or the store fails
// (pool 2); force sends every upload there.
const (
	PoolOff   PoolMode = "off"
	PoolAuto  PoolMode = "auto"
	PoolForce PoolMode = "force"
)

// ImageCodec is the value of the image_codec knob.
type ImageCodec string

// Image codecs.
const (
	CodecHEIC ImageCodec = "heic"
	CodecJPEG ImageCodec = "jpeg"
)

// Knobs is the typed, effective view of the flex state for one node: the
// global knobs with the overrides of the node's scopes applied. The zero
// value is not meaningful; use Defaults or Effective.
type Knobs struct {
	Version             int64
	Level               string
	Retries             bool
	ImageCodec          ImageCodec
	ImageQuality        int
	VideoBitrateKbps    int
	Pool1               PoolMode
	Pool2               PoolMode
	StoreWriteBudget    float64
	Pool1DrainPerS      float64
	TimelineDelayRatio  float64
	TimelineReleasePerS float64
	ShedRatio           map[string]float64 // by business
	ExpiresAt           time.Time
}

// Default knob values of the normal level (knobTable uses them).
const (
	DefaultImageCodec          = CodecHEIC
	DefaultImageQuality        = 50 // chosen by BenchmarkHEICvsJPEG (BENCHMARKS.md, docs/compress.md)
	DefaultVideoBitrateKbps    = 1800
	DefaultStoreWriteBudget    = 200
	DefaultPool1DrainPerS      = 20
	DefaultTimelineReleasePerS = 200
)

// Knob ranges.
const (
	MinImageQuality     = 10
	MaxImageQuality     = 95
	MinVideoBitrateKbps = 300
	maxRate             = 1e6
	maxBitrateKbps      = 100000
)

// knobType is how a knob's value is written and checked.
type knobType int

const (
	knobEnum  knobType = iota // one of values
	knobInt                   // an integer in [min, max]
	knobFloat                 // a number in [min, max]
)

// knobSpec describes one global knob: its name, type, allowed values and
// normal-level default, and where it lands in Knobs. The levels' values
// are the plans of levels.yaml, checked against this table.
type knobSpec struct {
	name     string
	typ      knobType
	values   []string // knobEnum
	min, max float64  // knobInt, knobFloat
	// maxIsNormal: the maximum is the normal level's value (a level may
	// only lower it).
	maxIsNormal bool
	def         string
	set         func(k *Knobs, v string) // v already valid
}

// knobTable is the one description of the global knobs. shed_ratio.BUSINESS
// is a float in [0,1] per business of the business table.
var knobTable = []knobSpec{
	{name: KnobRetries, typ: knobEnum, values: []string{"on", "off"}, def: "on",
		set: func(k *Knobs, v string) { k.Retries = v == "on" }},
	{name: KnobImageCodec, typ: knobEnum, values: []string{string(CodecHEIC), string(CodecJPEG)}, def: string(DefaultImageCodec),
		set: func(k *Knobs, v string) { k.ImageCodec = ImageCodec(v) }},
	{name: KnobImageQuality, typ: knobInt, min: MinImageQuality, max: MaxImageQuality, def: strconv.Itoa(DefaultImageQuality),
		set: func(k *Knobs, v string) { setInt(&k.ImageQuality, v) }},
	{name: KnobVideoBitrateKbps, typ: knobInt, min: MinVideoBitrateKbps, max: maxBitrateKbps, maxIsNormal: true,
		def: strconv.Itoa(DefaultVideoBitrateKbps), set: func(k *Knobs, v string) { setInt(&k.VideoBitrateKbps, v) }},
	{name: KnobPool1, typ: knobEnum, values: poolModes, def: string(PoolAuto),
		set: func(k *Knobs, v string) { k.Pool1 = PoolMode(v) }},
	{name: KnobPool2, typ: knobEnum, values: poolModes, def: string(PoolAuto),
		set: func(k *Knobs, v string) { k.Pool2 = PoolMode(v) }},
	{name: KnobStoreWriteBudget, typ: knobFloat, min: 1, max: maxRate, def: fmtFloat(DefaultStoreWriteBudget),
		set: func(k *Knobs, v string) { setFloat(&k.StoreWriteBudget, v) }},
	{name: KnobPool1DrainPerS, typ: knobFloat, min: 0, max: maxRate, def: fmtFloat(DefaultPool1DrainPerS),
		set: func(k *Knobs, v string) { setFloat(&k.Pool1DrainPerS, v) }},
	{name: KnobTimelineDelayRatio, typ: knobFloat, min: 0, max: 1, def: "0",
		set: func(k *Knobs, v string) { setFloat(&k.TimelineDelayRatio, v) }},
	{name: KnobTimelineReleasePS, typ: knobFloat, min: 0, max: maxRate, def: fmtFloat(DefaultTimelineReleasePerS),
		set: func(k *Knobs, v string) { setFloat(&k.TimelineReleasePerS, v) }},
}

var poolModes = []string{string(PoolOff), string(PoolAuto), string(PoolForce)}

// shedRatioSpec describes every shed_ratio.BUSINESS knob.
var shedRatioSpec = knobSpec{typ: knobFloat, min: 0, max: 1, def: "0"}

// knobSpecs indexes knobTable by name.
var knobSpecs = func() map[string]*knobSpec {
	m := make(map[string]*knobSpec, len(knobTable))
	for i := range knobTable {
		m[knobTable[i].name] = &knobTable[i]
	}
	return m
}()

// globalKnobNames returns the names of knobTable, in table order.
func globalKnobNames() []string {
	names := make([]string, len(knobTable))
	for i, s := range knobTable {
		names[i] = s.name
	}
	return names
}

// check reports whether value is allowed by spec; hi overrides the
// maximum when spec.maxIsNormal and hi > 0. allowed describes the range.
func (spec *knobSpec) check(value string, hi float64) (allowed string, ok bool) {
	switch spec.typ {
	case knobEnum:
		return "one of " + strings.Join(spec.values, "|"), slices.Contains(spec.values, value)
	case knobInt:
		max := spec.max
		if spec.maxIsNormal && hi > 0 {
			max = hi
		}
		n, err := strconv.Atoi(value)
		return "an integer in [" + fmtFloat(spec.min) + "," + fmtFloat(max) + "]",
			err == nil && float64(n) >= spec.min && float64(n) <= max
	default:
		f, err := strconv.ParseFloat(value, 64)
		return "a number in [" + fmtFloat(spec.min) + "," + fmtFloat(spec.max) + "]",
			err == nil && !math.IsNaN(f) && f >= spec.min && f <= spec.max
	}
}

// Defaults returns the knobs of the normal level.
func Defaults() Knobs {
	k := Knobs{Level: LevelNormal, ShedRatio: map[string]float64{}}
	for _, s := range knobTable {
		s.set(&k, s.def)
	}
	return k
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
		if spec, ok := knobSpecs[name]; ok {
			if _, valid := spec.check(v, 0); valid || spec.typ != knobEnum {
				spec.set(k, v) // numbers: set ignores what does not parse
			}
			continue
		}
		if b, ok := strings.CutPrefix(name, ShedRatioPrefix); ok {
			var f float64
			setFloat(&f, v)
			k.ShedRatio[b] = f
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
