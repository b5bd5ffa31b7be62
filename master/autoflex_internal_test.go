package master

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"willow/flex"
	willowv1 "willow/proto/willow/v1"
)

const testPolicy = `
ceiling: yellow
manual_hold: 30m
rules:
  - {name: cq, signal: compress_queue_p99_ms, above: 1000, below: 300, dwell: 10s, cooldown: 60s, level: blue}
  - {name: sw, signal: store_write_ratio, above: 0.9, below: 0.5, dwell: 5s, cooldown: 30s, level: yellow}
`

func testAutoPolicy(t *testing.T, y string) *AutoPolicy {
	t.Helper()
	p, err := LoadAutoPolicy([]byte(y), flex.DefaultPlans())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sim drives an engine with a signal series on an injected clock, applying
// every step to its level as the master would.
type sim struct {
	e     *autoEngine
	now   time.Time
	level string
	mem   autoMemory
	steps []autoStep
}

func newSim(t *testing.T, y string) *sim {
	return &sim{e: newAutoEngine(testAutoPolicy(t, y), flex.DefaultPlans()), now: t0, level: "normal"}
}

// run feeds sig once a second for d.
func (s *sim) run(d time.Duration, sig func(i int) map[string]float64) {
	for i := 0; i < int(d/time.Second); i++ {
		s.now = s.now.Add(time.Second)
		s.e.observe(s.now, sig(i))
		if st, ok := s.e.decide(s.now, s.level, s.mem); ok {
			s.level = st.Level
			s.steps = append(s.steps, st)
			s.mem.LastStepAt, s.mem.LastStep = s.now.UnixMilli(), st.Level
			if s.mem.Fired == nil {
				s.mem.Fired = map[string]int64{}
			}
			for _, r := range st.Rules {
				s.mem.Fired[r] = s.now.UnixMilli()
			}
		}
	}
}

func constSig(m map[string]float64) func(int) map[string]float64 {
	return func(int) map[string]float64 { return m }
}

func (s *sim) levels() string {
	var l []string
	for _, st := range s.steps {
		l = append(l, st.Level)
	}
	return strings.Join(l, ",")
}

func TestAutoEscalationOrderDwellAndDeescalation(t *testing.T) {
	s := newSim(t, testPolicy)
	hot := constSig(map[string]float64{SignalCompressQueueP99: 1800, SignalStoreWriteRatio: 0.3})
	// Dwell: 9 s above the threshold (10 samples) is not enough.
	s.run(10*time.Second, hot)
	if len(s.steps) != 0 {
		t.Fatalf("stepped before the dwell: %s", s.levels())
	}
	s.run(time.Second, hot)
	if s.levels() != "blue" {
		t.Fatalf("after 10 s above: steps %q, want blue", s.levels())
	}
	if got, want := s.steps[0].Reason, "cq: compress queue p99 1.8 s > 1 s for 10 s"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	// The store then goes over budget too: yellow after its own dwell (5 s).
	hotter := constSig(map[string]float64{SignalCompressQueueP99: 1800, SignalStoreWriteRatio: 0.95})
	s.run(6*time.Second, hotter)
	if s.levels() != "blue,yellow" {
		t.Fatalf("steps %q, want blue,yellow", s.levels())
	}
	if !strings.Contains(s.steps[1].Reason, "sw: store writes / budget 0.95 > 0.9 for 5 s") {
		t.Errorf("yellow reason %q", s.steps[1].Reason)
	}
	// Calm: one level at a time, each after the dwell below the hysteresis
	// threshold and the cooldown since the last step.
	calm := constSig(map[string]float64{SignalCompressQueueP99: 100, SignalStoreWriteRatio: 0.2})
	s.run(29*time.Second, calm) // sw's cooldown is 30 s since the yellow step
	if s.levels() != "blue,yellow" {
		t.Fatalf("went down within the cooldown: %s", s.levels())
	}
	s.run(time.Second, calm)
	if s.levels() != "blue,yellow,blue" {
		t.Fatalf("steps %q, want blue,yellow,blue", s.levels())
	}
	if !strings.Contains(s.steps[2].Reason, "sw: store writes / budget 0.2 < 0.5") {
		t.Errorf("de-escalation reason %q", s.steps[2].Reason)
	}
	s.run(59*time.Second, calm) // cq's cooldown is 60 s since the last step
	if s.levels() != "blue,yellow,blue" {
		t.Fatalf("blue left within the cooldown: %s", s.levels())
	}
	s.run(time.Second, calm)
	if s.levels() != "blue,yellow,blue,normal" {
		t.Fatalf("steps %q, want ...,normal", s.levels())
	}
	s.run(5*time.Minute, calm)
	if len(s.steps) != 4 {
		t.Fatalf("extra steps when calm: %s", s.levels())
	}
}

func TestAutoJumpsToTheHighestFiringLevel(t *testing.T) {
	s := newSim(t, testPolicy)
	s.run(10*time.Second, constSig(map[string]float64{SignalCompressQueueP99: 5000, SignalStoreWriteRatio: 2}))
	// sw fires first (5 s dwell) straight to yellow; cq then has nothing to add.
	if s.levels() != "yellow" {
		t.Fatalf("steps %q, want yellow", s.levels())
	}
}

func TestAutoHysteresisHoldsBetweenThresholds(t *testing.T) {
	s := newSim(t, testPolicy)
	s.run(11*time.Second, constSig(map[string]float64{SignalCompressQueueP99: 1500}))
	// Between below (300) and above (1000): the level holds for ever.
	s.run(10*time.Minute, constSig(map[string]float64{SignalCompressQueueP99: 500}))
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue only", s.levels())
	}
}

func TestAutoOscillatingSignalDoesNotFlap(t *testing.T) {
	// Around the threshold: never above for the whole dwell.
	s := newSim(t, testPolicy)
	s.run(10*time.Minute, func(i int) map[string]float64 {
		v := 1100.0
		if i%5 == 4 {
			v = 900
		}
		return map[string]float64{SignalCompressQueueP99: v}
	})
	if len(s.steps) != 0 {
		t.Fatalf("oscillation around the threshold stepped: %s", s.levels())
	}
	// Swinging across both thresholds with a 30 s period (15 s above, 15 s
	// below): the dwell and cooldown bound the steps to one per cooldown.
	s = newSim(t, testPolicy)
	s.run(20*time.Minute, func(i int) map[string]float64 {
		v := 2000.0
		if (i/15)%2 == 1 {
			v = 100
		}
		return map[string]float64{SignalCompressQueueP99: v}
	})
	if n := len(s.steps); n == 0 || n > 2*20 {
		t.Fatalf("%d steps in 20 min (%s): want some, at most 2 per 60 s cooldown", n, s.levels())
	}
	for i := 1; i < len(s.steps); i++ {
		if s.steps[i].Level == s.steps[i-1].Level {
			t.Fatalf("two steps to the same level: %s", s.levels())
		}
	}
	// The same swing with a 10 s period never holds 10 s: nothing happens.
	s = newSim(t, testPolicy)
	s.run(20*time.Minute, func(i int) map[string]float64 {
		v := 2000.0
		if (i/5)%2 == 1 {
			v = 100
		}
		return map[string]float64{SignalCompressQueueP99: v}
	})
	if len(s.steps) != 0 {
		t.Fatalf("a 10 s swing stepped: %s", s.levels())
	}
}

func TestAutoCeiling(t *testing.T) {
	y := `
ceiling: blue
rules:
  - {name: cq, signal: compress_queue_p99_ms, above: 1000, below: 300, dwell: 1s, level: blue}
`
	s := newSim(t, y)
	s.run(time.Minute, constSig(map[string]float64{SignalCompressQueueP99: 9000}))
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue only (ceiling)", s.levels())
	}
	// A level above the ceiling (a human's red) is never touched.
	s = newSim(t, testPolicy)
	s.level = "red"
	s.run(10*time.Minute, constSig(map[string]float64{SignalCompressQueueP99: 0}))
	if len(s.steps) != 0 || s.level != "red" {
		t.Fatalf("auto-flex moved a level above its ceiling: %s", s.levels())
	}
	// A rule above the ceiling is refused.
	_, err := LoadAutoPolicy([]byte(`
ceiling: blue
rules: [{name: x, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: yellow}]`), flex.DefaultPlans())
	if err == nil || !strings.Contains(err.Error(), "rules[0].level: yellow is above the ceiling blue") {
		t.Fatalf("err %v", err)
	}
}

func TestAutoPolicyValidation(t *testing.T) {
	plans := flex.DefaultPlans()
	if p, err := DefaultAutoPolicy(plans); err != nil || p.Ceiling != "yellow" || p.ManualHold != 30*time.Minute || len(p.Rules) == 0 {
		t.Fatalf("shipped policy %+v, %v", p, err)
	}
	rule := func(kv string) string {
		r := map[string]string{"name": "a", "signal": "compress_backlog", "above": "5", "below": "1", "dwell": "1s", "level": "blue"}
		if kv != "" {
			k, v, _ := strings.Cut(strings.TrimPrefix(kv, ", "), ": ")
			r[k] = v
		}
		var parts []string
		for _, k := range []string{"name", "signal", "above", "below", "dwell", "cooldown", "level"} {
			if v, ok := r[k]; ok {
				parts = append(parts, k+": "+v)
			}
		}
		return "rules:\n  - {" + strings.Join(parts, ", ") + "}\n"
	}
	for _, tc := range []struct{ yaml, want string }{
		{"ceiling: purple\n" + rule(""), "ceiling: unknown level \"purple\""},
		{"manual_hold: soon\n" + rule(""), "manual_hold: \"soon\" is not a duration"},
		{"rules: []", "rules: at least one rule"},
		{rule(", signal: cpu"), "rules[0].signal: unknown signal \"cpu\""},
		{"rules:\n  - {name: a, signal: compress_backlog, below: 1, dwell: 1s, level: blue}", "rules[0].above: required"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 6, dwell: 1s, level: blue}", "rules[0].below: 6 must be under above (5)"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, level: blue}", "rules[0].dwell: required"},
		{rule(", cooldown: -1s"), "rules[0].cooldown: \"-1s\" is not a duration"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: normal}", "rules[0].level: normal is the lowest level"},
		{rule("") + "  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue}", "rules[1].name: \"a\" used twice"},
		{rule("") + "colour: red\n", "field colour not found"},
	} {
		_, err := LoadAutoPolicy([]byte(tc.yaml), plans)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("policy %q: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// autoServer is a flex server with auto-flex, the policy testPolicy and
// an injected signal series.
func autoServer(t *testing.T, st flexStore, clock *fakeClock) (*Server, *signalBox) {
	t.Helper()
	s := newFlexServer(t, st, clock)
	s.autoPol = testAutoPolicy(t, testPolicy)
	s.autoEng = newAutoEngine(s.autoPol, s.plans)
	s.edgeOut = map[string]edgeSample{}
	box := &signalBox{}
	s.signals = box.get
	s.leader = true
	return s, box
}

type signalBox struct {
	mu sync.Mutex
	m  map[string]float64
}

func (b *signalBox) set(m map[string]float64) { b.mu.Lock(); b.m = m; b.mu.Unlock() }
func (b *signalBox) get() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m
}

// tick runs n auto-flex ticks one second apart.
func tick(t *testing.T, s *Server, clock *fakeClock, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		clock.Add(time.Second)
		if err := s.autoOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func setAuto(t *testing.T, s *Server, mode string) {
	t.Helper()
	if _, err := s.SetFlexAuto(context.Background(), &willowv1.SetFlexAutoRequest{Token: "t", Mode: mode, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
}

func TestAutoStepsAreAuditedFlexChanges(t *testing.T) {
	clock := &fakeClock{t: t0}
	s, sig := autoServer(t, &memFlexStore{}, clock)
	sig.set(map[string]float64{SignalCompressQueueP99: 1800})
	tick(t, s, clock, 15)
	if lvl := s.flexSnapshot().GetLevel(); lvl != "normal" {
		t.Fatalf("auto-flex off moved the level to %s", lvl)
	}
	setAuto(t, s, AutoOn)
	tick(t, s, clock, 1)
	st := s.flexSnapshot()
	if st.GetLevel() != "blue" || st.GetActor() != AutoFlexActor {
		t.Fatalf("level %s by %s, want blue by auto-flex", st.GetLevel(), st.GetActor())
	}
	h := history(t, s)
	if e := h[0]; e.GetActor() != AutoFlexActor || e.GetAction() != "set" || !e.GetAccepted() ||
		!strings.Contains(e.GetReason(), "compress queue p99 1.8 s > 1 s for 15 s") || e.GetToVersion() != e.GetFromVersion()+1 {
		t.Fatalf("audit %v", e)
	}
	if e := h[1]; e.GetAction() != "auto" || e.GetActor() != "oncall" || !strings.Contains(e.GetReason(), "auto-flex on (was off)") {
		t.Fatalf("mode audit %v", e)
	}
	as := s.autoStatus()
	if as.GetMode() != AutoOn || !strings.HasPrefix(as.GetLastStep(), "blue: cq:") || as.GetSignals()[SignalCompressQueueP99] != 1800 {
		t.Fatalf("status %v", as)
	}
}

func TestAutoManualOverridePauses(t *testing.T) {
	clock := &fakeClock{t: t0}
	s, sig := autoServer(t, &memFlexStore{}, clock)
	setAuto(t, s, AutoOn)
	ctx := context.Background()
	if _, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Token: "t", Level: "yellow", Reason: "on-call knows better"}); err != nil {
		t.Fatal(err)
	}
	as := s.autoStatus()
	if want := t0.UnixMilli() + (30 * time.Minute).Milliseconds(); as.GetPausedUntilUnixMs() != want || as.GetPausedBy() != "oncall" {
		t.Fatalf("pause %d by %q, want %d by oncall", as.GetPausedUntilUnixMs(), as.GetPausedBy(), want)
	}
	if !strings.Contains(AutoSummary(as), "paused until") {
		t.Fatalf("summary %q", AutoSummary(as))
	}
	// Calm signals would bring yellow down, but the human holds for 30 min.
	sig.set(map[string]float64{SignalCompressQueueP99: 10, SignalStoreWriteRatio: 0.1})
	tick(t, s, clock, 29*60)
	if lvl := s.flexSnapshot().GetLevel(); lvl != "yellow" {
		t.Fatalf("auto-flex moved %s during the manual hold", lvl)
	}
	tick(t, s, clock, 62)
	if st := s.flexSnapshot(); st.GetLevel() != "blue" || st.GetActor() != AutoFlexActor {
		t.Fatalf("after the hold: %s by %s, want blue by auto-flex", st.GetLevel(), st.GetActor())
	}
	// A rollback is a manual change too; `auto on` ends the pause.
	if _, err := s.RollbackFlex(ctx, &willowv1.RollbackFlexRequest{Token: "t", Reason: "back"}); err != nil {
		t.Fatal(err)
	}
	if s.autoStatus().GetPausedUntilUnixMs() == 0 {
		t.Fatal("rollback did not pause auto-flex")
	}
	setAuto(t, s, AutoOn)
	if s.autoStatus().GetPausedUntilUnixMs() != 0 {
		t.Fatal("auto on did not end the pause")
	}
	// Off: no pause is recorded and nothing moves.
	setAuto(t, s, AutoOff)
	if _, err := s.SetFlex(ctx, &willowv1.SetFlexRequest{Token: "t", Level: "normal", Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	if s.autoStatus().GetPausedUntilUnixMs() != 0 {
		t.Fatal("a change with auto-flex off recorded a pause")
	}
}

func TestAutoDryRunOnlyProposes(t *testing.T) {
	clock := &fakeClock{t: t0}
	s, sig := autoServer(t, &memFlexStore{}, clock)
	setAuto(t, s, AutoDryRun)
	sig.set(map[string]float64{SignalCompressQueueP99: 1800, SignalStoreWriteRatio: 0.95})
	tick(t, s, clock, 60)
	st := s.flexSnapshot()
	if st.GetLevel() != "normal" {
		t.Fatalf("dry-run changed the level to %s", st.GetLevel())
	}
	as := s.autoStatus()
	if !strings.HasPrefix(as.GetProposal(), "auto-flex would set yellow: ") || !strings.Contains(as.GetProposal(), "sw: store writes / budget 0.95 > 0.9") {
		t.Fatalf("proposal %q", as.GetProposal())
	}
	props := 0
	for _, e := range history(t, s) {
		if e.GetAction() == "propose" {
			props++
			if strings.Fields(e.GetFrom())[1:][0] != strings.Fields(e.GetTo())[1:][0] {
				t.Errorf("a proposal changed the state: %s -> %s", e.GetFrom(), e.GetTo())
			}
		}
	}
	if props != 1 {
		t.Fatalf("%d proposals audited in a minute, want 1", props)
	}
}

// TestAutoTwoActorsStepOnce: two masters on one store that both believe
// they lead (a lease handover) decide the same step: it is taken once.
func TestAutoTwoActorsStepOnce(t *testing.T) {
	clock := &fakeClock{t: t0}
	st := &memFlexStore{}
	a, sigA := autoServer(t, st, clock)
	b, sigB := autoServer(t, st, clock)
	setAuto(t, a, AutoOn)
	hot := map[string]float64{SignalCompressQueueP99: 1800}
	sigA.set(hot)
	sigB.set(hot)
	for i := 0; i < 15; i++ {
		clock.Add(time.Second)
		ctx := context.Background()
		for _, s := range []*Server{a, b} {
			if err := s.reloadFlex(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, s := range []*Server{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.autoOnce(ctx) }()
		}
		wg.Wait()
	}
	steps := 0
	for _, e := range history(t, a) {
		if e.GetActor() == AutoFlexActor && e.GetAction() == "set" {
			steps++
		}
	}
	if steps != 1 {
		t.Fatalf("%d auto-flex steps, want 1", steps)
	}
}

// TestSignalFormat: a small signal keeps its digits in a reason (a store
// write ratio of 0.0025 read "0" once, as if the signal were missing).
func TestSignalFormat(t *testing.T) {
	for _, tc := range []struct {
		signal string
		v      float64
		want   string
	}{
		{SignalStoreWriteRatio, 0.0025, "0.0025"},
		{SignalStoreWriteRatio, 0.95, "0.95"},
		{SignalStoreWriteRatio, 0, "0"},
		{SignalCompressQueueP99, 1800, "1.8 s"},
		{SignalCompressQueueP99, 12.5, "12.5 ms"},
		{SignalEdgeBytesOut, 2.5e6, "2.5 MB/s"},
	} {
		if got := fmtSignal(tc.signal, tc.v); got != tc.want {
			t.Errorf("fmtSignal(%s, %v) = %q, want %q", tc.signal, tc.v, got, tc.want)
		}
	}
}
