package flex

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Level names of the shipped plans, from mildest to harshest.
const (
	LevelNormal = "normal"
	LevelBlue   = "blue"
	LevelYellow = "yellow"
	LevelRed    = "red"
)

// Errors returned by validation. A *KnobError wraps one of the first three.
var (
	ErrUnknownKnob     = errors.New("unknown knob")
	ErrUnknownBusiness = errors.New("unknown business")
	ErrOutOfRange      = errors.New("value out of range")
	ErrUnknownLevel    = errors.New("unknown level")
	ErrBadPlans        = errors.New("bad levels file")
)

// KnobError is a rejected knob value. Its message names the knob and what
// it allows.
type KnobError struct {
	Knob    string
	Value   string
	Allowed string // e.g. "[0,1]", "one of on|off"
	Err     error  // ErrUnknownKnob, ErrUnknownBusiness or ErrOutOfRange
}

func (e *KnobError) Error() string {
	switch {
	case errors.Is(e.Err, ErrUnknownKnob):
		return fmt.Sprintf("unknown knob %q (known: %s)", e.Knob, e.Allowed)
	case errors.Is(e.Err, ErrUnknownBusiness):
		return fmt.Sprintf("knob %s: unknown business (known: %s)", e.Knob, e.Allowed)
	}
	return fmt.Sprintf("knob %s=%q: allowed %s", e.Knob, e.Value, e.Allowed)
}

func (e *KnobError) Unwrap() error { return e.Err }

//go:embed levels.yaml
var shippedLevels []byte

// Plans are the named level plans and the known businesses. Each plan
// maps every knob to its value (resolved through its base levels). Plans
// are immutable after LoadPlans.
type Plans struct {
	businesses []string
	levels     map[string]map[string]string
	order      []string
}

type levelsFile struct {
	Businesses []string `yaml:"businesses"`
	// Pointers: yaml.v3 reuses one struct value across map entries, so a
	// map of structs with maps inside would leak knobs between levels.
	Levels map[string]*levelSpec `yaml:"levels"`
}

type levelSpec struct {
	Base  string            `yaml:"base"`
	Knobs map[string]string `yaml:"knobs"`
}

// DefaultPlans returns the shipped plans (flex/levels.yaml).
func DefaultPlans() *Plans {
	p, err := LoadPlans(shippedLevels)
	if err != nil {
		panic("flex: shipped levels.yaml is invalid: " + err.Error())
	}
	return p
}

// LoadPlans parses a levels YAML file. The normal level starts from
// Defaults; every other level from its base (default normal). It returns
// an error wrapping ErrBadPlans, naming the level and knob, when a plan
// names an unknown knob or business, a value out of range, an unknown or
// cyclic base, or when normal is missing.
func LoadPlans(data []byte) (*Plans, error) {
	var f levelsFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPlans, err)
	}
	if len(f.Businesses) == 0 {
		return nil, fmt.Errorf("%w: no businesses listed", ErrBadPlans)
	}
	if _, ok := f.Levels[LevelNormal]; !ok {
		return nil, fmt.Errorf("%w: level %q missing", ErrBadPlans, LevelNormal)
	}
	p := &Plans{businesses: slices.Clone(f.Businesses), levels: map[string]map[string]string{}}
	sort.Strings(p.businesses)
	var resolve func(name string, seen []string) (map[string]string, error)
	resolve = func(name string, seen []string) (map[string]string, error) {
		if m, ok := p.levels[name]; ok {
			return m, nil
		}
		if slices.Contains(seen, name) {
			return nil, fmt.Errorf("%w: level %q: base cycle %v", ErrBadPlans, name, append(seen, name))
		}
		lv, ok := f.Levels[name]
		if !ok || lv == nil {
			lv = &levelSpec{}
		}
		if !ok {
			return nil, fmt.Errorf("%w: level %q: unknown base level", ErrBadPlans, name)
		}
		var m map[string]string
		if name == LevelNormal {
			m = p.defaultMap()
		} else {
			base := lv.Base
			if base == "" {
				base = LevelNormal
			}
			bm, err := resolve(base, append(seen, name))
			if err != nil {
				return nil, err
			}
			m = cloneMap(bm)
		}
		normal := p.levels[LevelNormal] // nil while resolving normal itself
		for k, v := range lv.Knobs {
			if err := p.validateWith(k, v, normal); err != nil {
				return nil, fmt.Errorf("%w: level %q: %w", ErrBadPlans, name, err)
			}
			m[k] = v
		}
		p.levels[name] = m
		return m, nil
	}
	// normal first: other levels validate the bitrate against it.
	if _, err := resolve(LevelNormal, nil); err != nil {
		return nil, err
	}
	for name := range f.Levels {
		if _, err := resolve(name, nil); err != nil {
			return nil, err
		}
	}
	for name := range p.levels {
		p.order = append(p.order, name)
	}
	rank := map[string]int{LevelNormal: 0, LevelBlue: 1, LevelYellow: 2, LevelRed: 3}
	sort.Slice(p.order, func(i, j int) bool {
		ri, oki := rank[p.order[i]]
		rj, okj := rank[p.order[j]]
		if oki != okj {
			return oki
		}
		if ri != rj {
			return ri < rj
		}
		return p.order[i] < p.order[j]
	})
	return p, nil
}

// defaultMap is Defaults as a knob map, with every business's shed ratio.
func (p *Plans) defaultMap() map[string]string {
	d := Defaults()
	m := map[string]string{
		KnobRetries:            "on",
		KnobImageCodec:         d.ImageCodec,
		KnobImageQuality:       strconv.Itoa(d.ImageQuality),
		KnobVideoBitrateKbps:   strconv.Itoa(d.VideoBitrateKbps),
		KnobPool1:              d.Pool1,
		KnobPool2:              d.Pool2,
		KnobStoreWriteBudget:   fmtFloat(d.StoreWriteBudget),
		KnobPool1DrainPerS:     fmtFloat(d.Pool1DrainPerS),
		KnobTimelineDelayRatio: fmtFloat(d.TimelineDelayRatio),
		KnobTimelineReleasePS:  fmtFloat(d.TimelineReleasePerS),
	}
	for _, b := range p.businesses {
		m[ShedRatioPrefix+b] = "0"
	}
	return m
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func cloneMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Levels returns the level names, mildest first.
func (p *Plans) Levels() []string { return slices.Clone(p.order) }

// Businesses returns the known businesses, sorted.
func (p *Plans) Businesses() []string { return slices.Clone(p.businesses) }

// Plan returns a copy of the full knob map of level, or ErrUnknownLevel.
func (p *Plans) Plan(level string) (map[string]string, error) {
	m, ok := p.levels[level]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownLevel, level, strings.Join(p.order, "|"))
	}
	return cloneMap(m), nil
}

// KnobNames returns every valid knob name, sorted.
func (p *Plans) KnobNames() []string {
	names := slices.Clone(globalKnobs)
	for _, b := range p.businesses {
		names = append(names, ShedRatioPrefix+b)
	}
	sort.Strings(names)
	return names
}

var globalKnobs = []string{
	KnobRetries, KnobImageCodec, KnobImageQuality, KnobVideoBitrateKbps, KnobPool1, KnobPool2,
	KnobStoreWriteBudget, KnobPool1DrainPerS, KnobTimelineDelayRatio, KnobTimelineReleasePS,
}

// Validate checks one knob value. It returns a *KnobError naming the knob
// and its allowed values: ratios in [0,1], image_quality in [10,95],
// video_bitrate_kbps between 300 and the normal level's value, enums among
// their values, shed_ratio.BUSINESS for known businesses only.
func (p *Plans) Validate(knob, value string) error {
	return p.validateWith(knob, value, p.levels[LevelNormal])
}

// Knob ranges.
const (
	MinImageQuality     = 10
	MaxImageQuality     = 95
	MinVideoBitrateKbps = 300
	maxRate             = 1e6
	maxBitrateKbps      = 100000
)

func (p *Plans) validateWith(knob, value string, normal map[string]string) error {
	kerr := func(allowed string, err error) error {
		return &KnobError{Knob: knob, Value: value, Allowed: allowed, Err: err}
	}
	enum := func(vals ...string) error {
		if slices.Contains(vals, value) {
			return nil
		}
		return kerr("one of "+strings.Join(vals, "|"), ErrOutOfRange)
	}
	intRange := func(lo, hi int) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			return kerr(fmt.Sprintf("an integer in [%d,%d]", lo, hi), ErrOutOfRange)
		}
		return nil
	}
	floatRange := func(lo, hi float64) error {
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || f < lo || f > hi {
			return kerr(fmt.Sprintf("a number in [%s,%s]", fmtFloat(lo), fmtFloat(hi)), ErrOutOfRange)
		}
		return nil
	}
	switch knob {
	case KnobRetries:
		return enum("on", "off")
	case KnobImageCodec:
		return enum("heic", "jpeg")
	case KnobImageQuality:
		return intRange(MinImageQuality, MaxImageQuality)
	case KnobVideoBitrateKbps:
		hi := maxBitrateKbps // the normal plan itself
		if normal != nil {
			if n, err := strconv.Atoi(normal[KnobVideoBitrateKbps]); err == nil {
				hi = n
			}
		}
		return intRange(MinVideoBitrateKbps, hi)
	case KnobPool1, KnobPool2:
		return enum("off", "auto", "force")
	case KnobStoreWriteBudget:
		return floatRange(1, maxRate)
	case KnobPool1DrainPerS, KnobTimelineReleasePS:
		return floatRange(0, maxRate)
	case KnobTimelineDelayRatio:
		return floatRange(0, 1)
	}
	if b, ok := strings.CutPrefix(knob, ShedRatioPrefix); ok {
		if !slices.Contains(p.businesses, b) {
			return kerr(strings.Join(p.businesses, "|"), ErrUnknownBusiness)
		}
		return floatRange(0, 1)
	}
	return kerr(strings.Join(append(slices.Clone(globalKnobs), ShedRatioPrefix+"BUSINESS"), "|"), ErrUnknownKnob)
}
