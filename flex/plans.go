package flex

import (
	_ "embed"
	"errors"
	"fmt"
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
	// Businesses may repeat the business table (older files list it);
	// another list is an error, since the table is the one list.
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
	if _, ok := f.Levels[LevelNormal]; !ok {
		return nil, fmt.Errorf("%w: level %q missing", ErrBadPlans, LevelNormal)
	}
	p := &Plans{businesses: BusinessNames(), levels: map[string]map[string]string{}}
	if len(f.Businesses) > 0 {
		listed := slices.Sorted(slices.Values(f.Businesses))
		if !slices.Equal(listed, p.businesses) {
			return nil, fmt.Errorf("%w: businesses %v differ from flex's business table %v", ErrBadPlans, f.Businesses, p.businesses)
		}
	}
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

// defaultMap is the normal level's knob map: every knob of knobTable at
// its default, and every business's shed ratio at 0.
func (p *Plans) defaultMap() map[string]string {
	m := map[string]string{}
	for _, spec := range knobTable {
		m[spec.name] = spec.def
	}
	for _, b := range p.businesses {
		m[ShedRatioPrefix+b] = shedRatioSpec.def
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
	names := globalKnobNames()
	for _, b := range p.businesses {
		names = append(names, ShedRatioPrefix+b)
	}
	sort.Strings(names)
	return names
}

// Validate checks one knob value. It returns a *KnobError naming the knob
// and its allowed values (knobTable): ratios in [0,1], image_quality in
// [10,95], video_bitrate_kbps between 300 and the normal level's value,
// enums among their values, shed_ratio.BUSINESS for known businesses only.
func (p *Plans) Validate(knob, value string) error {
	return p.validateWith(knob, value, p.levels[LevelNormal])
}

func (p *Plans) validateWith(knob, value string, normal map[string]string) error {
	kerr := func(allowed string, err error) error {
		return &KnobError{Knob: knob, Value: value, Allowed: allowed, Err: err}
	}
	spec, ok := knobSpecs[knob]
	if !ok {
		b, isShed := strings.CutPrefix(knob, ShedRatioPrefix)
		switch {
		case !isShed:
			return kerr(strings.Join(append(globalKnobNames(), ShedRatioPrefix+"BUSINESS"), "|"), ErrUnknownKnob)
		case !slices.Contains(p.businesses, b):
			return kerr(strings.Join(p.businesses, "|"), ErrUnknownBusiness)
		}
		spec = &shedRatioSpec
	}
	var hi float64 // the normal plan's own value bounds the levels'
	if spec.maxIsNormal && normal != nil {
		if n, err := strconv.ParseFloat(normal[knob], 64); err == nil {
			hi = n
		}
	}
	if allowed, ok := spec.check(value, hi); !ok {
		return kerr(allowed, ErrOutOfRange)
	}
	return nil
}
