package flex

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// ErrBadScope is returned for a scope that is not "region:NAME" or
// "group:NAME".
var ErrBadScope = errors.New("bad scope")

// Layer is the setting of one scope: an optional level and single-knob
// overrides on top of it.
type Layer struct {
	Level     string            `json:"level,omitempty"`
	Overrides map[string]string `json:"overrides,omitempty"`
}

// Setting is the editable form of the flex state: the global layer and
// the staged-rollout layers by scope. Render turns it into a FlexState.
type Setting struct {
	Global Layer            `json:"global"`
	Scopes map[string]Layer `json:"scopes,omitempty"`
}

var scopeRe = regexp.MustCompile(`^(region|group):[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateScope checks a scope name; "" is the global scope.
func ValidateScope(scope string) error {
	if scope == "" || scopeRe.MatchString(scope) {
		return nil
	}
	return fmt.Errorf("%w %q: want region:NAME or group:NAME", ErrBadScope, scope)
}

// Clone returns a deep copy of s.
func (s Setting) Clone() Setting {
	c := Setting{Global: s.Global.clone()}
	if len(s.Scopes) > 0 {
		c.Scopes = make(map[string]Layer, len(s.Scopes))
		for k, l := range s.Scopes {
			c.Scopes[k] = l.clone()
		}
	}
	return c
}

func (l Layer) clone() Layer {
	c := Layer{Level: l.Level}
	if len(l.Overrides) > 0 {
		c.Overrides = cloneMap(l.Overrides)
	}
	return c
}

// Render returns the FlexState of s (without version and attribution):
// knobs are the global level's plan plus the global overrides; each scope
// carries its level's full plan (when it names one) plus its overrides.
func (p *Plans) Render(s Setting) (*willowv1.FlexState, error) {
	lvl := s.Global.Level
	if lvl == "" {
		lvl = LevelNormal
	}
	knobs, err := p.Plan(lvl)
	if err != nil {
		return nil, err
	}
	for k, v := range s.Global.Overrides {
		knobs[k] = v
	}
	st := &willowv1.FlexState{Level: lvl, Knobs: knobs}
	names := make([]string, 0, len(s.Scopes))
	for n := range s.Scopes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l := s.Scopes[n]
		sk := map[string]string{}
		if l.Level != "" {
			if sk, err = p.Plan(l.Level); err != nil {
				return nil, err
			}
		}
		for k, v := range l.Overrides {
			sk[k] = v
		}
		st.Scopes = append(st.Scopes, &willowv1.ScopedKnobs{Scope: n, Level: l.Level, Knobs: sk})
	}
	return st, nil
}

// Flatten returns s as a flat map: "level", "knob/NAME" for the global
// layer and "SCOPE|level", "SCOPE|knob/NAME" for scopes. Absent entries are
// unset.
func (s Setting) Flatten() map[string]string {
	m := map[string]string{}
	put := func(prefix string, l Layer) {
		if l.Level != "" {
			m[prefix+"level"] = l.Level
		}
		for k, v := range l.Overrides {
			m[prefix+"knob/"+k] = v
		}
	}
	put("", s.Global)
	for n, l := range s.Scopes {
		put(n+"|", l)
	}
	return m
}

// Unflatten is the inverse of Flatten.
func Unflatten(m map[string]string) Setting {
	var s Setting
	layer := func(scope string) *Layer {
		if scope == "" {
			return &s.Global
		}
		if s.Scopes == nil {
			s.Scopes = map[string]Layer{}
		}
		l := s.Scopes[scope]
		return &l
	}
	for key, v := range m {
		scope, rest, ok := strings.Cut(key, "|")
		if !ok {
			scope, rest = "", key
		}
		l := layer(scope)
		if rest == "level" {
			l.Level = v
		} else if k, ok := strings.CutPrefix(rest, "knob/"); ok {
			if l.Overrides == nil {
				l.Overrides = map[string]string{}
			}
			l.Overrides[k] = v
		}
		if scope != "" {
			s.Scopes[scope] = *l
		}
	}
	return s
}

// Revert undoes the change before→after on cur: every entry the change
// touched is restored to its before value if cur still holds the after
// value; entries changed since by someone else are left alone.
func Revert(cur, before, after Setting) Setting {
	c, b, a := cur.Flatten(), before.Flatten(), after.Flatten()
	keys := map[string]bool{}
	for k := range b {
		keys[k] = true
	}
	for k := range a {
		keys[k] = true
	}
	for k := range keys {
		bv, bok := b[k]
		av, aok := a[k]
		if bok == aok && bv == av {
			continue // untouched by the change
		}
		cv, cok := c[k]
		if cok != aok || cv != av {
			continue // changed again since
		}
		if bok {
			c[k] = bv
		} else {
			delete(c, k)
		}
	}
	return Unflatten(c)
}

// Change is one knob whose value differs between two states, in one scope
// ("" for global). Level changes use the knob name "level".
type Change struct {
	Scope string `json:"scope,omitempty"`
	Knob  string `json:"knob"`
	From  string `json:"from"`
	To    string `json:"to"`
}

func (c Change) String() string {
	s := c.Knob
	if c.Scope != "" {
		s = c.Scope + " " + s
	}
	from, to := c.From, c.To
	if from == "" {
		from = "-"
	}
	if to == "" {
		to = "-"
	}
	return fmt.Sprintf("%s: %s -> %s", s, from, to)
}

// Diff lists what differs between two flex states: the global knobs
// (and "level") first, then, per scope, the knobs whose effective value in
// that scope (global plus the scope's overrides) changed differently from
// the global change. Sorted by knob; a nil state is empty.
func Diff(a, b *willowv1.FlexState) []Change {
	var out []Change
	keysOf := func(x, y map[string]string) []string {
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		return names
	}
	withLevel := func(level string, knobs map[string]string) map[string]string {
		m := cloneMap(knobs)
		if level != "" {
			m["level"] = level
		}
		return m
	}
	ga, gb := withLevel(a.GetLevel(), a.GetKnobs()), withLevel(b.GetLevel(), b.GetKnobs())
	for _, k := range keysOf(ga, gb) {
		if ga[k] != gb[k] {
			out = append(out, Change{Knob: k, From: ga[k], To: gb[k]})
		}
	}
	effective := func(global map[string]string, sc *willowv1.ScopedKnobs) map[string]string {
		m := cloneMap(global)
		for k, v := range withLevel(sc.GetLevel(), sc.GetKnobs()) {
			m[k] = v
		}
		return m
	}
	sa, sb := scopeMap(a), scopeMap(b)
	names := map[string]bool{}
	for n := range sa {
		names[n] = true
	}
	for n := range sb {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		x, y := effective(ga, sa[n]), effective(gb, sb[n])
		for _, k := range keysOf(x, y) {
			if x[k] != y[k] && (x[k] != ga[k] || y[k] != gb[k]) {
				out = append(out, Change{Scope: n, Knob: k, From: x[k], To: y[k]})
			}
		}
	}
	return out
}

func scopeMap(st *willowv1.FlexState) map[string]*willowv1.ScopedKnobs {
	m := map[string]*willowv1.ScopedKnobs{}
	for _, sc := range st.GetScopes() {
		m[sc.GetScope()] = sc
	}
	return m
}

// Summary is a one-line description of a state for the audit log:
// "v3 yellow image_quality=40 | region:a red".
func Summary(st *willowv1.FlexState, plans *Plans) string {
	if st == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "v%d %s", st.GetVersion(), st.GetLevel())
	writeOverrides(&b, st.GetLevel(), st.GetKnobs(), plans)
	for _, sc := range st.GetScopes() {
		fmt.Fprintf(&b, " | %s", sc.GetScope())
		if sc.GetLevel() != "" {
			fmt.Fprintf(&b, " %s", sc.GetLevel())
			writeOverrides(&b, sc.GetLevel(), sc.GetKnobs(), plans)
		} else {
			writeOverrides(&b, "", sc.GetKnobs(), plans)
		}
	}
	if ms := st.GetExpiresAtUnixMs(); ms > 0 {
		fmt.Fprintf(&b, " (expires %s)", time.UnixMilli(ms).UTC().Format(time.RFC3339))
	}
	return b.String()
}

// writeOverrides writes the knobs that differ from level's plan (all of
// them when level is "").
func writeOverrides(b *strings.Builder, level string, knobs map[string]string, plans *Plans) {
	var plan map[string]string
	if level != "" && plans != nil {
		plan, _ = plans.Plan(level)
	}
	names := make([]string, 0, len(knobs))
	for k, v := range knobs {
		if plan == nil || plan[k] != v {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(b, " %s=%s", k, knobs[k])
	}
}

// Status is the JSON form of a flex state used by `willow flex status
// --json` and the console: version, level, knobs (name to value),
// expires_at (RFC 3339 or null) and the scoped overrides.
type Status struct {
	Version   int64             `json:"version"`
	Level     string            `json:"level"`
	Knobs     map[string]string `json:"knobs"`
	ExpiresAt *string           `json:"expires_at"`
	Scopes    []ScopeStatus     `json:"scopes"`
	Actor     string            `json:"actor,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	ChangedAt *string           `json:"changed_at,omitempty"`
}

// ScopeStatus is one staged rollout in a Status.
type ScopeStatus struct {
	Scope string            `json:"scope"`
	Level string            `json:"level,omitempty"`
	Knobs map[string]string `json:"knobs"`
}

// NewStatus converts st to its JSON form.
func NewStatus(st *willowv1.FlexState) Status {
	s := Status{
		Version: st.GetVersion(), Level: st.GetLevel(), Knobs: st.GetKnobs(),
		Actor: st.GetActor(), Reason: st.GetReason(), Scopes: []ScopeStatus{},
	}
	if s.Knobs == nil {
		s.Knobs = map[string]string{}
	}
	if ms := st.GetExpiresAtUnixMs(); ms > 0 {
		t := time.UnixMilli(ms).UTC().Format(time.RFC3339)
		s.ExpiresAt = &t
	}
	if ms := st.GetChangedAtUnixMs(); ms > 0 {
		t := time.UnixMilli(ms).UTC().Format(time.RFC3339)
		s.ChangedAt = &t
	}
	for _, sc := range st.GetScopes() {
		k := sc.GetKnobs()
		if k == nil {
			k = map[string]string{}
		}
		s.Scopes = append(s.Scopes, ScopeStatus{Scope: sc.GetScope(), Level: sc.GetLevel(), Knobs: k})
	}
	return s
}
