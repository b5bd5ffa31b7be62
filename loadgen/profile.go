package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"willow/flex"
)

// Profile is a load profile.
type Profile struct {
	Name        string   `yaml:"name" json:"name"`
	Description string   `yaml:"description" json:"description,omitempty"`
	PhotoDir    string   `yaml:"photo_dir" json:"photo_dir"`
	VideoDir    string   `yaml:"video_dir" json:"video_dir,omitempty"`
	Phases      []Phase  `yaml:"phases" json:"phases"`
	Actions     []Action `yaml:"actions" json:"actions,omitempty"`
}

// Phase is one stretch of constant offered load.
type Phase struct {
	Name     string   `yaml:"name" json:"name"`
	Duration Duration `yaml:"duration" json:"duration"`
	// UploadRate and DownloadRate are arrivals per second.
	UploadRate   float64 `yaml:"upload_rate" json:"upload_rate"`
	DownloadRate float64 `yaml:"download_rate" json:"download_rate"`
	// UploadRateEnd, when set, ramps the upload rate linearly from
	// UploadRate to it over the phase.
	UploadRateEnd float64 `yaml:"upload_rate_end" json:"upload_rate_end,omitempty"`
	// VideoShare is the fraction of uploads that are videos.
	VideoShare float64 `yaml:"video_share" json:"video_share"`
	// Businesses is the business mix of uploads (weights); default
	// flex.DefaultBusiness.
	Businesses map[string]float64 `yaml:"businesses" json:"businesses"`
	// Users is the user population; default 1000.
	Users int `yaml:"users" json:"users"`
	// ZipfAlpha is the popularity skew of downloads; default 0.8.
	ZipfAlpha float64 `yaml:"zipf_alpha" json:"zipf_alpha"`
	// MaxPhotoBytes skips photos larger than this (0 = all).
	MaxPhotoBytes int64 `yaml:"max_photo_bytes" json:"max_photo_bytes,omitempty"`
}

// Action is a flex change or a drill at a time from the start of the run.
type Action struct {
	At     Duration          `yaml:"at" json:"at"`
	Level  string            `yaml:"level" json:"level,omitempty"`
	Knobs  map[string]string `yaml:"knobs" json:"knobs,omitempty"`
	Drill  *DrillAction      `yaml:"drill" json:"drill,omitempty"`
	Reason string            `yaml:"reason" json:"reason,omitempty"`
}

// DrillAction orders a fault drill on one node (by node ID or address).
type DrillAction struct {
	Kind       string   `yaml:"kind" json:"kind"` // latency | errors | silence
	Node       string   `yaml:"node" json:"node"`
	LatencyMs  int64    `yaml:"latency_ms" json:"latency_ms,omitempty"`
	ErrorRatio float64  `yaml:"error_ratio" json:"error_ratio,omitempty"`
	For        Duration `yaml:"for" json:"for"`
}

// Duration is a time.Duration read from YAML as "90s", "2m" or "00:40"
// (mm:ss).
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	var mm, ss int
	if k, err := fmt.Sscanf(s, "%d:%d", &mm, &ss); err == nil && k == 2 && len(s) == 5 {
		*d = Duration(time.Duration(mm)*time.Minute + time.Duration(ss)*time.Second)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. 30s, 2m or mm:ss)", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ErrProfile is wrapped by every profile validation error.
var ErrProfile = errors.New("bad profile")

// LoadProfile reads and validates a profile file. Errors name the field.
// Relative media directories are taken from the profile file's directory.
func LoadProfile(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := ParseProfile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, d := range []*string{&p.PhotoDir, &p.VideoDir} {
		if *d != "" && !filepath.IsAbs(*d) {
			*d = filepath.Join(filepath.Dir(path), *d)
		}
	}
	return p, nil
}

// ParseProfile parses and validates a profile. Unknown fields are errors.
func ParseProfile(b []byte) (*Profile, error) {
	var p Profile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProfile, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks the profile and fills defaults. Errors wrap ErrProfile
// and name the field, e.g. "phases[1].upload_rate".
func (p *Profile) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrProfile, field, fmt.Sprintf(format, args...))
	}
	if p.Name == "" {
		return bad("name", "required")
	}
	if len(p.Phases) == 0 {
		return bad("phases", "at least one phase is required")
	}
	if p.PhotoDir == "" {
		return bad("photo_dir", "required")
	}
	var total time.Duration
	for i := range p.Phases {
		ph := &p.Phases[i]
		f := fmt.Sprintf("phases[%d]", i)
		if ph.Name == "" {
			return bad(f+".name", "required")
		}
		if ph.Duration <= 0 {
			return bad(f+".duration", "must be > 0")
		}
		for name, v := range map[string]float64{"upload_rate": ph.UploadRate, "download_rate": ph.DownloadRate, "upload_rate_end": ph.UploadRateEnd} {
			if v < 0 || v > 100000 {
				return bad(f+"."+name, "%v outside [0, 100000]", v)
			}
		}
		if ph.VideoShare < 0 || ph.VideoShare > 1 {
			return bad(f+".video_share", "%v outside [0, 1]", ph.VideoShare)
		}
		if ph.VideoShare > 0 && p.VideoDir == "" {
			return bad(f+".video_share", "needs video_dir")
		}
		if ph.Users < 0 {
			return bad(f+".users", "must be >= 0")
		}
		if ph.Users == 0 {
			ph.Users = 1000
		}
		if ph.ZipfAlpha < 0 || ph.ZipfAlpha > 5 {
			return bad(f+".zipf_alpha", "%v outside [0, 5]", ph.ZipfAlpha)
		}
		if ph.ZipfAlpha == 0 {
			ph.ZipfAlpha = 0.8
		}
		if len(ph.Businesses) == 0 {
			ph.Businesses = map[string]float64{flex.DefaultBusiness: 1}
		}
		sum := 0.0
		for b, w := range ph.Businesses {
			if w < 0 {
				return bad(f+".businesses."+b, "weight must be >= 0")
			}
			sum += w
		}
		if sum == 0 {
			return bad(f+".businesses", "weights sum to 0")
		}
		total += ph.Duration.D()
	}
	for i, a := range p.Actions {
		f := fmt.Sprintf("actions[%d]", i)
		if a.At < 0 || a.At.D() > total {
			return bad(f+".at", "%v outside the run (0 to %v)", a.At.D(), total)
		}
		if a.Level == "" && len(a.Knobs) == 0 && a.Drill == nil {
			return bad(f, "needs a level, knobs or a drill")
		}
		if d := a.Drill; d != nil {
			switch d.Kind {
			case "latency", "errors", "silence":
			default:
				return bad(f+".drill.kind", "%q is not latency, errors or silence", d.Kind)
			}
			if d.Node == "" {
				return bad(f+".drill.node", "required")
			}
			if d.For <= 0 {
				return bad(f+".drill.for", "must be > 0")
			}
			if d.ErrorRatio < 0 || d.ErrorRatio > 1 {
				return bad(f+".drill.error_ratio", "%v outside [0, 1]", d.ErrorRatio)
			}
		}
	}
	return nil
}

// Total is the profile's whole duration.
func (p *Profile) Total() time.Duration {
	var t time.Duration
	for _, ph := range p.Phases {
		t += ph.Duration.D()
	}
	return t
}

// Scaled returns a copy with every duration and time multiplied by f
// (--time-scale).
func (p *Profile) Scaled(f float64) *Profile {
	q := *p
	q.Phases = append([]Phase(nil), p.Phases...)
	q.Actions = append([]Action(nil), p.Actions...)
	for i := range q.Phases {
		q.Phases[i].Duration = Duration(float64(q.Phases[i].Duration) * f)
	}
	for i := range q.Actions {
		q.Actions[i].At = Duration(float64(q.Actions[i].At) * f)
	}
	return &q
}
