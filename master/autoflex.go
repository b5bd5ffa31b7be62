package master

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"willow/flex"
)

// Auto-flex: the master steps the flex level from live signals, under a
// policy (autoflex.yaml). The guarantees, which docs/flex.md explains for
// on-call:
//
//   - Every step is an ordinary flex change: validated against the level
//     plans, versioned, compare-and-set in Redis, streamed to every node,
//     audited with actor AutoFlexActor and a reason naming the rules and the
//     signal values that fired ("compress queue p99 1.8 s > 1 s for 10 s").
//   - Up: a rule fires when its signal has stayed above its threshold for
//     its dwell, counted from the last step at the earliest (a level is
//     judged by its own effect, not by the backlog the level before left
//     behind); the level becomes the highest level asked by a firing rule,
//     never above the ceiling (default yellow). A level above the ceiling
//     (a human's red) is never touched. A rule does not fire again within
//     its cooldown.
//   - A rule with a rising needs a trend too: its rising signal at least
//     `by` times its mean over the `over` before the signal's last 10 s
//     (its rise), so it can lead a ramp from a threshold a steady load
//     near it would cross. It counts as clear once the rise falls under
//     the rising's `below` (default 1) or under, or its signal under
//     its own.
//   - Down: one level at a time, when every rule at or above the current
//     level has stayed below its hysteresis threshold for its dwell, counted
//     from the last step at the earliest, and the cooldowns of those rules
//     have passed since the last step. A signal between the two thresholds
//     holds the level: an oscillating signal cannot flap it.
//   - Humans win: a manual change (set, knob, rollback, a scheduled change
//     when applied) pauses auto-flex for the policy's manual_hold (default
//     30 min). In dry-run auto-flex only proposes ("auto-flex would set
//     yellow: ...") and changes nothing.
//   - Mode, pause, the last step, the proposal and the cooldowns live in the
//     flex document in Redis: they survive a master restart and failover.
//     Only the master holding the leader lease evaluates; each step is a
//     compare-and-set that checks the level is still the one it saw, so two
//     masters never step twice. A new leader starts its dwell timers afresh:
//     after a failover a step comes at most one dwell later, never twice.

// AutoFlexActor is the audit actor of automatic steps.
const AutoFlexActor = "auto-flex"

// Auto-flex modes.
const (
	AutoOff    = "off"
	AutoOn     = "on"
	AutoDryRun = "dry-run"
)

// Auto-flex defaults.
const (
	DefaultManualHold = 30 * time.Minute
	// autoTick is how often the leader evaluates the policy.
	autoTick = 500 * time.Millisecond
)

// Signals auto-flex reads from the nodes' heartbeats (the last Load of
// every live node).
const (
	SignalCompressQueueP99 = "compress_queue_p99_ms" // highest p99 queueing time of a compress node, ms
	SignalCompressBacklog  = "compress_backlog"      // compress tasks waiting, all nodes
	SignalCompressDemand   = "compress_demand"       // highest compress node's tasks in work or waiting per worker, 10 s average
	SignalUploadInFlight   = "upload_in_flight"      // requests in flight on the upload fronts, all
	SignalUploadRate       = "upload_rate"           // uploads finished per second on the upload fronts, all, 10 s average
	SignalUploadArrivals   = "upload_arrivals"       // new uploads begun per second on the upload fronts, all, 10 s average
	SignalUploadShed       = "upload_shed"           // 1 - the lowest admitted share of an upload front
	SignalStoreWriteRatio  = "store_write_ratio"     // highest front store writes/s (10 s average) over store_write_budget
	SignalEdgeBytesOut     = "edge_bytes_out_per_s"  // edge cache response bytes/s, all nodes
	SignalTimelineHeld     = "timeline_held"         // held notifications, all timeline nodes
	// The forecasts: the upload arrivals (else the upload rate) times the
	// compress nodes' measured seconds per image task, over their worker
	// slots. 1 means the uploads now arriving would keep every compress
	// worker busy; it reads the arrivals, so it rises with a ramp before
	// a queue forms.
	SignalCompressForecast       = "compress_forecast"        // at the image codec each node runs now
	SignalCompressForecastNormal = "compress_forecast_normal" // at the lowest level's image codec: what stepping back would cost
	// The arrivals at a region's upload fronts times the CPU seconds an
	// image task takes at the lowest level's codec, over the CPUs of the
	// hosts the region's compress nodes run on (each host once), the
	// highest region: 1 means the arrivals would keep those CPUs busy.
	SignalCompressCPUForecastNormal = "compress_cpu_forecast_normal"
)

// signalInfo says how a signal reads in reasons.
type signalInfo struct {
	label string
	unit  string // ms | bytes/s | "" (a count or a ratio)
}

var signalTable = map[string]signalInfo{
	SignalCompressQueueP99:          {"compress queue p99", "ms"},
	SignalCompressBacklog:           {"compress backlog", ""},
	SignalCompressDemand:            {"compress demand (tasks per worker)", ""},
	SignalUploadInFlight:            {"upload in flight", ""},
	SignalUploadRate:                {"upload rate", "/s"},
	SignalUploadArrivals:            {"upload arrivals", "/s"},
	SignalUploadShed:                {"upload shed share", ""},
	SignalStoreWriteRatio:           {"store writes / budget", ""},
	SignalEdgeBytesOut:              {"edge bytes out", "bytes/s"},
	SignalTimelineHeld:              {"timeline held", ""},
	SignalCompressForecast:          {"compress forecast (worker share)", ""},
	SignalCompressForecastNormal:    {"compress forecast at normal (worker share)", ""},
	SignalCompressCPUForecastNormal: {"compress CPU forecast at normal (CPU share)", ""},
}

// SignalNames lists the signals a policy may name.
func SignalNames() []string {
	names := make([]string, 0, len(signalTable))
	for n := range signalTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

//go:embed autoflex.yaml
var shippedAutoPolicy []byte

// AutoPolicy is a validated auto-flex policy.
type AutoPolicy struct {
	Ceiling    string
	ManualHold time.Duration
	Rules      []AutoRule
}

// AutoRule maps one signal to a level.
type AutoRule struct {
	Name     string
	Signal   string
	Level    string
	Above    float64 // fires above this for Dwell
	Below    float64 // clear below this for Dwell (hysteresis)
	Dwell    time.Duration
	Cooldown time.Duration
	// Hold, when set, keeps the rule from clearing while the load that
	// caused its level persists: the rule counts as clear only once
	// HoldSignal has also stayed below HoldBelow for Dwell. It is for a
	// rule whose level hides its own signal (yellow empties the compress
	// queue that fired it): the hold reads a signal the level does not
	// change, such as the upload rate. It never raises a level.
	HoldSignal string
	HoldBelow  float64
	// Rising, when RiseSignal is set, is a trend the rule needs too: it
	// fires only while RiseSignal is at least RiseBy times its level
	// before (its rise), and counts as clear as soon as the rise is at
	// RiseBelow or under, whatever its own signal reads. It is for a rule
	// that leads a ramp from a lower threshold than a level would be
	// safe at: the threshold alone would fire on a steady load that sits
	// near it, the rise alone on a load too small to matter.
	RiseSignal string
	RiseBy     float64
	RiseBelow  float64
	RiseOver   time.Duration
}

// riseRecent is the recent part of a rising signal that its rise sets
// against the level before: the window of the signals' own averages
// (signalWindow), so the level before is the RiseOver before the samples
// the value now is made of. A rise is known once the level before holds
// a quarter of RiseOver: after a master start or a time without traffic
// it takes riseRecent + RiseOver/4 of samples.
const riseRecent = signalWindow

type policyFile struct {
	Ceiling    string     `yaml:"ceiling"`
	ManualHold string     `yaml:"manual_hold"`
	Rules      []ruleFile `yaml:"rules"`
}

type ruleFile struct {
	Name     string    `yaml:"name"`
	Signal   string    `yaml:"signal"`
	Level    string    `yaml:"level"`
	Above    *float64  `yaml:"above"`
	Below    *float64  `yaml:"below"`
	Dwell    string    `yaml:"dwell"`
	Cooldown string    `yaml:"cooldown"`
	Hold     *holdFile `yaml:"hold"`
	Rising   *riseFile `yaml:"rising"`
}

type riseFile struct {
	Signal string   `yaml:"signal"`
	By     *float64 `yaml:"by"`
	Below  *float64 `yaml:"below"`
	Over   string   `yaml:"over"`
}

type holdFile struct {
	Signal string   `yaml:"signal"`
	Below  *float64 `yaml:"below"`
}

// DefaultAutoPolicy returns the shipped policy (autoflex.yaml) validated
// against plans: with levels of its own a master may not fit it.
func DefaultAutoPolicy(plans *flex.Plans) (*AutoPolicy, error) {
	return LoadAutoPolicy(shippedAutoPolicy, plans)
}

// LoadAutoPolicy parses and validates a policy against the level plans.
// Errors name the field: "rules[1].below: 1200 must be under above (1000)".
func LoadAutoPolicy(data []byte, plans *flex.Plans) (*AutoPolicy, error) {
	var f policyFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auto-flex policy: %w", err)
	}
	levels := plans.Levels()
	p := &AutoPolicy{Ceiling: f.Ceiling, ManualHold: DefaultManualHold}
	if p.Ceiling == "" {
		p.Ceiling = "yellow"
	}
	ceil := slices.Index(levels, p.Ceiling)
	if ceil < 0 {
		return nil, fmt.Errorf("auto-flex policy: ceiling: unknown level %q (levels: %s)", f.Ceiling, strings.Join(levels, ", "))
	}
	if f.ManualHold != "" {
		d, err := time.ParseDuration(f.ManualHold)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("auto-flex policy: manual_hold: %q is not a duration >= 0 (e.g. 30m)", f.ManualHold)
		}
		p.ManualHold = d
	}
	names := map[string]bool{}
	for i, r := range f.Rules {
		field := func(name string) string { return fmt.Sprintf("auto-flex policy: rules[%d].%s", i, name) }
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("%s: required", field("name"))
		case names[r.Name]:
			return nil, fmt.Errorf("%s: %q used twice", field("name"), r.Name)
		}
		names[r.Name] = true
		if _, ok := signalTable[r.Signal]; !ok {
			return nil, fmt.Errorf("%s: unknown signal %q (signals: %s)", field("signal"), r.Signal, strings.Join(SignalNames(), ", "))
		}
		li := slices.Index(levels, r.Level)
		switch {
		case li < 0:
			return nil, fmt.Errorf("%s: unknown level %q (levels: %s)", field("level"), r.Level, strings.Join(levels, ", "))
		case li == 0:
			return nil, fmt.Errorf("%s: %s is the lowest level: a rule must ask for more", field("level"), r.Level)
		case li > ceil:
			return nil, fmt.Errorf("%s: %s is above the ceiling %s", field("level"), r.Level, p.Ceiling)
		}
		if r.Above == nil || math.IsNaN(*r.Above) || math.IsInf(*r.Above, 0) || *r.Above < 0 {
			return nil, fmt.Errorf("%s: required, a number >= 0", field("above"))
		}
		if r.Below == nil || math.IsNaN(*r.Below) || *r.Below < 0 {
			return nil, fmt.Errorf("%s: required, a number >= 0", field("below"))
		}
		if *r.Below >= *r.Above {
			return nil, fmt.Errorf("%s: %v must be under above (%v)", field("below"), *r.Below, *r.Above)
		}
		rule := AutoRule{Name: r.Name, Signal: r.Signal, Level: r.Level, Above: *r.Above, Below: *r.Below}
		var err error
		if rule.Dwell, err = parsePolicyDuration(r.Dwell, true); err != nil {
			return nil, fmt.Errorf("%s: %v", field("dwell"), err)
		}
		if rule.Cooldown, err = parsePolicyDuration(r.Cooldown, false); err != nil {
			return nil, fmt.Errorf("%s: %v", field("cooldown"), err)
		}
		if h := r.Hold; h != nil {
			if _, ok := signalTable[h.Signal]; !ok {
				return nil, fmt.Errorf("%s: unknown signal %q (signals: %s)", field("hold.signal"), h.Signal, strings.Join(SignalNames(), ", "))
			}
			if h.Signal == r.Signal {
				return nil, fmt.Errorf("%s: %s is the rule's own signal: a hold reads a signal the level does not change", field("hold.signal"), h.Signal)
			}
			if h.Below == nil || math.IsNaN(*h.Below) || math.IsInf(*h.Below, 0) || *h.Below <= 0 {
				return nil, fmt.Errorf("%s: required, a number > 0", field("hold.below"))
			}
			rule.HoldSignal, rule.HoldBelow = h.Signal, *h.Below
		}
		if rs := r.Rising; rs != nil {
			if err := rule.setRising(rs); err != nil {
				return nil, fmt.Errorf("%s%v", field("rising."), err)
			}
		}
		p.Rules = append(p.Rules, rule)
	}
	if len(p.Rules) == 0 {
		return nil, errors.New("auto-flex policy: rules: at least one rule is required")
	}
	return p, nil
}

// setRising validates a rule's rising and sets it; an error starts with
// the field's name under rising.
func (rule *AutoRule) setRising(rs *riseFile) error {
	rule.RiseSignal = rs.Signal
	if rule.RiseSignal == "" {
		rule.RiseSignal = rule.Signal
	}
	if _, ok := signalTable[rule.RiseSignal]; !ok {
		return fmt.Errorf("signal: unknown signal %q (signals: %s)", rs.Signal, strings.Join(SignalNames(), ", "))
	}
	if rs.By == nil || math.IsNaN(*rs.By) || math.IsInf(*rs.By, 0) || *rs.By <= 1 {
		return errors.New("by: required, a number > 1 (the signal now over its level before)")
	}
	rule.RiseBy, rule.RiseBelow = *rs.By, 1
	if rs.Below != nil {
		if math.IsNaN(*rs.Below) || *rs.Below <= 0 || *rs.Below >= rule.RiseBy {
			return fmt.Errorf("below: %v must be over 0 and under by (%v)", *rs.Below, rule.RiseBy)
		}
		rule.RiseBelow = *rs.Below
	}
	d, err := parsePolicyDuration(rs.Over, true)
	if err != nil {
		return fmt.Errorf("over: %v", err)
	}
	if d < riseRecent {
		return fmt.Errorf("over: %s is shorter than the %s of the signals' own averages", rs.Over, fmtSecs(riseRecent))
	}
	rule.RiseOver = d
	return nil
}

func parsePolicyDuration(s string, required bool) (time.Duration, error) {
	if s == "" {
		if required {
			return 0, errors.New("required, a duration > 0 (e.g. 10s)")
		}
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || (required && d == 0) {
		return 0, fmt.Errorf("%q is not a duration > 0 (e.g. 10s)", s)
	}
	return d, nil
}

// ruleState is what the engine remembers of one rule between samples.
type ruleState struct {
	value      float64
	known      bool      // the signal had data in the last sample
	aboveSince time.Time // zero: not above the threshold
	belowSince time.Time // zero: not below the hysteresis threshold
	// The hold signal (AutoRule.HoldSignal), when the rule has one.
	holdValue float64
	holdKnown bool
	holdSince time.Time // zero: not below HoldBelow
	// The rising signal (AutoRule.RiseSignal), when the rule has one:
	// its samples since it was last absent or 0, back to riseRecent +
	// RiseOver, and its last value and rise.
	riseHist  []riseSample
	riseValue float64
	rise      float64
	riseKnown bool
}

type riseSample struct {
	at time.Time
	v  float64
}

// observeRise adds the rising signal's sample v (ok: present) at now and
// sets the rise: v over the mean of the samples in the RiseOver before
// the last riseRecent, known once those reach back RiseOver/4. A sample
// absent or at 0 forgets the samples before: a rise from nothing (a fleet
// starting, a region drained) is a start, not a trend, and has no level
// to be measured against.
func (st *ruleState) observeRise(r AutoRule, now time.Time, v float64, ok bool) {
	st.riseValue, st.rise, st.riseKnown = v, 0, false
	if !ok || v <= 0 {
		st.riseHist = st.riseHist[:0]
		return
	}
	st.riseHist = append(st.riseHist, riseSample{now, v})
	end := now.Add(-riseRecent)
	start := end.Add(-r.RiseOver)
	drop := 0
	for drop < len(st.riseHist) && !st.riseHist[drop].at.After(start) {
		drop++
	}
	st.riseHist = st.riseHist[drop:]
	if len(st.riseHist) == 0 || st.riseHist[0].at.After(end.Add(-r.RiseOver/4)) {
		return
	}
	sum, n := 0.0, 0
	for _, s := range st.riseHist {
		if s.at.After(end) {
			break
		}
		sum += s.v
		n++
	}
	st.rise, st.riseKnown = v/(sum/float64(n)), true
}

// fires says whether rule r's condition to fire holds in st's last sample:
// its signal above the threshold and, with a rising, the rise at RiseBy.
func (st *ruleState) fires(r AutoRule, v float64) bool {
	return v > r.Above && (r.RiseSignal == "" || (st.riseKnown && st.rise >= r.RiseBy))
}

// clears says whether rule r's own condition to clear holds: its signal
// below the hysteresis threshold or, with a rising, the rise at RiseBelow
// or under (or not known): a flat signal is no longer rising.
func (st *ruleState) clears(r AutoRule, v float64) bool {
	return v < r.Below || (r.RiseSignal != "" && (!st.riseKnown || st.rise <= r.RiseBelow))
}

// autoEngine evaluates a policy over a series of signal samples. It is
// pure (clock and signals come in), so the tests drive it with a series.
type autoEngine struct {
	pol    *AutoPolicy
	levels []string
	st     []ruleState
}

func newAutoEngine(pol *AutoPolicy, plans *flex.Plans) *autoEngine {
	return &autoEngine{pol: pol, levels: plans.Levels(), st: make([]ruleState, len(pol.Rules))}
}

// reset forgets the dwell timers (a master that just became leader).
func (e *autoEngine) reset() { e.st = make([]ruleState, len(e.pol.Rules)) }

// observe takes one sample of the signals. A signal absent from sig (no
// live node reports it) counts as below every threshold.
func (e *autoEngine) observe(now time.Time, sig map[string]float64) {
	for i, r := range e.pol.Rules {
		st := &e.st[i]
		v, ok := sig[r.Signal]
		st.value, st.known = v, ok
		if !ok {
			v = 0
		}
		if r.RiseSignal != "" {
			rv, ok := sig[r.RiseSignal]
			st.observeRise(r, now, rv, ok)
		}
		if st.fires(r, v) {
			if st.aboveSince.IsZero() {
				st.aboveSince = now
			}
		} else {
			st.aboveSince = time.Time{}
		}
		if st.clears(r, v) {
			if st.belowSince.IsZero() {
				st.belowSince = now
			}
		} else {
			st.belowSince = time.Time{}
		}
		if r.HoldSignal == "" {
			continue
		}
		hv, ok := sig[r.HoldSignal]
		st.holdValue, st.holdKnown = hv, ok
		if hv < r.HoldBelow { // absent counts as 0, like the rule's signal
			if st.holdSince.IsZero() {
				st.holdSince = now
			}
		} else {
			st.holdSince = time.Time{}
		}
	}
}

// clearSince is when rule i began to count as clear (its signal below its
// hysteresis threshold and, with a hold, the hold signal below its
// threshold); zero while it does not.
func (e *autoEngine) clearSince(i int) time.Time {
	st := e.st[i]
	if st.belowSince.IsZero() {
		return time.Time{}
	}
	if e.pol.Rules[i].HoldSignal == "" {
		return st.belowSince
	}
	if st.holdSince.IsZero() {
		return time.Time{}
	}
	if st.holdSince.After(st.belowSince) {
		return st.holdSince
	}
	return st.belowSince
}

// autoMemory is the part of the state kept in the flex document: when each
// rule last fired and when the last step was taken.
type autoMemory struct {
	LastStepAt int64            `json:"last_step_at_unix_ms,omitempty"`
	LastStep   string           `json:"last_step,omitempty"`
	Fired      map[string]int64 `json:"fired,omitempty"` // rule -> unix ms
}

// stepped records step, taken at ms: when, what, and when each rule that
// fired it fired (for their cooldowns). Fired is copied, not changed in
// place: m's may be shared with a flex state already stored.
func (m *autoMemory) stepped(ms int64, step autoStep) {
	fired := make(map[string]int64, len(m.Fired)+len(step.Rules))
	maps.Copy(fired, m.Fired)
	for _, r := range step.Rules {
		fired[r] = ms
	}
	m.Fired, m.LastStepAt, m.LastStep = fired, ms, step.Level+": "+step.Reason
}

// autoStep is a decision: set Level, for Reason, fired by Rules (up).
type autoStep struct {
	Level  string
	Reason string
	Up     bool
	Rules  []string
}

func (e *autoEngine) levelIndex(level string) int {
	if level == "" {
		return 0
	}
	return slices.Index(e.levels, level)
}

// decide returns the step the policy takes from level cur now, if any.
func (e *autoEngine) decide(now time.Time, cur string, mem autoMemory) (autoStep, bool) {
	ci := e.levelIndex(cur)
	ceil := e.levelIndex(e.pol.Ceiling)
	if ci < 0 || ci > ceil {
		return autoStep{}, false // a level auto-flex may not reach is a human's
	}
	lastStep := time.UnixMilli(mem.LastStepAt)
	// Up.
	target := ci
	var why []string
	var fired []string
	for i, r := range e.pol.Rules {
		st := e.st[i]
		li := e.levelIndex(r.Level)
		if li <= ci || st.aboveSince.IsZero() {
			continue
		}
		// A level is judged by its own effect: the dwell counts from the
		// last step at the earliest, so "blue is not enough" is seen at
		// blue, not in the backlog normal left behind.
		from := st.aboveSince
		if mem.LastStepAt != 0 && lastStep.After(from) {
			from = lastStep
		}
		if now.Sub(from) < r.Dwell {
			continue
		}
		if at, ok := mem.Fired[r.Name]; ok && now.Sub(time.UnixMilli(at)) < r.Cooldown {
			continue
		}
		target = max(target, min(li, ceil))
		fired = append(fired, r.Name)
		why = append(why, fmt.Sprintf("%s: %s %s > %s%s for %s", r.Name, signalTable[r.Signal].label,
			fmtSignal(r.Signal, st.value), fmtSignal(r.Signal, r.Above), st.riseWhy(r), fmtSecs(now.Sub(from))))
	}
	if target > ci {
		return autoStep{Level: e.levels[target], Up: true, Rules: fired, Reason: strings.Join(why, "; ")}, true
	}
	// Down, one level.
	if ci == 0 {
		return autoStep{}, false
	}
	why = why[:0]
	for i, r := range e.pol.Rules {
		if e.levelIndex(r.Level) < ci {
			continue
		}
		st := e.st[i]
		from := e.clearSince(i)
		if from.IsZero() {
			return autoStep{}, false
		}
		if mem.LastStepAt != 0 && lastStep.After(from) {
			from = lastStep
		}
		if now.Sub(from) < r.Dwell {
			return autoStep{}, false
		}
		if mem.LastStepAt != 0 && now.Sub(lastStep) < r.Cooldown {
			return autoStep{}, false
		}
		cond := fmt.Sprintf("%s %s < %s", signalTable[r.Signal].label, fmtSignal(r.Signal, st.value), fmtSignal(r.Signal, r.Below))
		if st.value >= r.Below { // cleared by its rising
			cond = st.riseClearWhy(r)
		}
		if r.HoldSignal != "" {
			cond += fmt.Sprintf(" and %s %s < %s", signalTable[r.HoldSignal].label,
				fmtSignal(r.HoldSignal, st.holdValue), fmtSignal(r.HoldSignal, r.HoldBelow))
		}
		why = append(why, fmt.Sprintf("%s: %s for %s", r.Name, cond, fmtSecs(now.Sub(from))))
	}
	reason := strings.Join(why, "; ")
	if reason == "" {
		reason = "no rule holds " + e.levels[ci]
	}
	return autoStep{Level: e.levels[ci-1], Reason: reason}, true
}

// riseWhy is the rising part of a firing rule's reason: " and upload
// arrivals 1.6/s rising 3.2x over 60 s" ("" without a rising).
func (st ruleState) riseWhy(r AutoRule) string {
	if r.RiseSignal == "" {
		return ""
	}
	what := ""
	if r.RiseSignal != r.Signal {
		what = signalTable[r.RiseSignal].label + " " + fmtSignal(r.RiseSignal, st.riseValue) + " "
	}
	return fmt.Sprintf(" and %srising %sx over %s", what, trimFloat(st.rise), fmtSecs(r.RiseOver))
}

// riseClearWhy says why a rule with a rising is clear while its own
// signal is not below its threshold: "upload arrivals 4.4/s rising 0.9x
// <= 1x over 60 s".
func (st ruleState) riseClearWhy(r AutoRule) string {
	label := signalTable[r.RiseSignal].label + " " + fmtSignal(r.RiseSignal, st.riseValue)
	if !st.riseKnown {
		return fmt.Sprintf("%s with no level over %s to rise from", label, fmtSecs(r.RiseOver))
	}
	return fmt.Sprintf("%s rising %sx <= %sx over %s", label, trimFloat(st.rise), trimFloat(r.RiseBelow), fmtSecs(r.RiseOver))
}

// rules reports each rule's state for FlexAutoStatus.
func (e *autoEngine) ruleStates(now time.Time) []ruleView {
	out := make([]ruleView, len(e.pol.Rules))
	for i, r := range e.pol.Rules {
		st := e.st[i]
		v := ruleView{rule: r, value: st.value, known: st.known, holdValue: st.holdValue, state: "between"}
		switch {
		case !st.aboveSince.IsZero():
			v.state, v.since = "rising", st.aboveSince
			if now.Sub(st.aboveSince) >= r.Dwell {
				v.state = "firing"
			}
		case !st.belowSince.IsZero() && r.HoldSignal != "" && st.holdSince.IsZero():
			// Below its own threshold, but the load that caused the
			// level is still there.
			v.state, v.since = "held", st.belowSince
		case !st.belowSince.IsZero():
			since := e.clearSince(i)
			v.state, v.since = "falling", since
			if now.Sub(since) >= r.Dwell {
				v.state = "clear"
			}
		}
		if !st.known {
			v.state = "no data" // no live node reports the signal: counts as clear
		}
		out[i] = v
	}
	return out
}

type ruleView struct {
	rule      AutoRule
	value     float64
	holdValue float64
	known     bool
	state     string
	since     time.Time
}

// fmtSignal formats a signal value with its unit: 1800 ms reads "1.8 s".
func fmtSignal(signal string, v float64) string {
	switch signalTable[signal].unit {
	case "ms":
		if v >= 1000 {
			return trimFloat(v/1000) + " s"
		}
		return trimFloat(v) + " ms"
	case "/s":
		return trimFloat(v) + "/s"
	case "bytes/s":
		switch {
		case v >= 1e9:
			return trimFloat(v/1e9) + " GB/s"
		case v >= 1e6:
			return trimFloat(v/1e6) + " MB/s"
		case v >= 1e3:
			return trimFloat(v/1e3) + " kB/s"
		}
		return trimFloat(v) + " B/s"
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	case a > 0 && a < 0.1:
		// Two significant digits: a small ratio (0.0025 of the store
		// write budget) must not read as 0.
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func fmtSecs(d time.Duration) string { return fmt.Sprintf("%.0f s", math.Floor(d.Seconds())) }
