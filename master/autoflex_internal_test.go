package master

import (
	"context"
	"fmt"
	"slices"
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
			s.mem.stepped(s.now.UnixMilli(), st)
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

// holdPolicy is the shipped policy's shape: blue, then yellow on the
// compress demand, yellow held while uploads keep coming.
const holdPolicy = `
rules:
  - {name: cd, signal: compress_demand, above: 2, below: 1, dwell: 5s, cooldown: 60s, level: blue}
  - {name: cdh, signal: compress_demand, above: 3, below: 1.5, dwell: 5s, cooldown: 60s, level: yellow,
     hold: {signal: upload_rate, below: 1}}
`

// TestAutoHoldThroughThePeak is the rehearsal's control problem: yellow
// empties the compress queue that fired it, so the demand reads low in the
// middle of the peak. The hold on the upload rate (which no level changes)
// keeps yellow until the peak is over, then the way down is one level at a
// time.
func TestAutoHoldThroughThePeak(t *testing.T) {
	s := newSim(t, holdPolicy)
	sig := func(demand, rate float64) func(int) map[string]float64 {
		return constSig(map[string]float64{SignalCompressDemand: demand, SignalUploadRate: rate})
	}
	s.run(20*time.Second, sig(0.8, 0.5)) // evening
	s.run(10*time.Second, sig(2.5, 1.5)) // the ramp: blue after 5 s
	s.run(10*time.Second, sig(3.5, 2.5)) // blue is not enough: yellow
	if s.levels() != "blue,yellow" {
		t.Fatalf("steps %q, want blue,yellow", s.levels())
	}
	// The peak at yellow: the demand falls under both hysteresis
	// thresholds, the uploads keep coming. Without the hold this stepped
	// down once the cooldown passed.
	s.run(3*time.Minute, sig(0.4, 4.5))
	if s.level != "yellow" || len(s.steps) != 2 {
		t.Fatalf("stepped in the peak: %s", s.levels())
	}
	st := s.e.ruleStates(s.now)
	if st[1].state != "held" || st[1].holdValue != 4.5 {
		t.Fatalf("cdh state %q hold value %v, want held at 4.5", st[1].state, st[1].holdValue)
	}
	// A rate swinging around the hold threshold holds too: it is never
	// below for the whole dwell.
	s.run(2*time.Minute, func(i int) map[string]float64 {
		r := 1.2
		if i%4 == 1 { // the last sample (i = 119) is above
			r = 0.8
		}
		return map[string]float64{SignalCompressDemand: 0.4, SignalUploadRate: r}
	})
	if s.level != "yellow" || len(s.steps) != 2 {
		t.Fatalf("stepped on a rate around the hold threshold: %s", s.levels())
	}
	// After the peak: down to blue once the rate stayed under 1/s for the
	// dwell, to normal a cooldown later.
	s.run(5*time.Second, sig(0.4, 0.5))
	if s.level != "yellow" {
		t.Fatalf("stepped before the dwell: %s", s.levels())
	}
	s.run(2*time.Second, sig(0.4, 0.5))
	if s.levels() != "blue,yellow,blue" {
		t.Fatalf("steps %q, want blue,yellow,blue", s.levels())
	}
	if r := s.steps[2].Reason; !strings.Contains(r, "cdh: compress demand (tasks per worker) 0.4 < 1.5 and upload rate 0.5/s < 1/s for 5 s") {
		t.Fatalf("reason %q", r)
	}
	s.run(50*time.Second, sig(0.4, 0.5))
	if s.level != "blue" {
		t.Fatalf("stepped again within the cooldown: %s", s.levels())
	}
	s.run(20*time.Second, sig(0.4, 0.5))
	if s.levels() != "blue,yellow,blue,normal" {
		t.Fatalf("steps %q, want blue,yellow,blue,normal", s.levels())
	}
	// The hold never raises a level: a high rate with a low demand stays
	// at normal.
	s.run(10*time.Minute, sig(0.4, 9))
	if len(s.steps) != 4 {
		t.Fatalf("the hold signal stepped up: %s", s.levels())
	}
}

// TestAutoLevelJudgedByItsOwnEffect: the dwell of a rule for a higher
// level counts from the last step, so the backlog normal left behind does
// not take blue straight on to yellow; yellow comes only if blue does not
// bring the signal down within the dwell.
func TestAutoLevelJudgedByItsOwnEffect(t *testing.T) {
	y := `
rules:
  - {name: cd, signal: compress_demand, above: 2, below: 1, dwell: 5s, cooldown: 60s, level: blue}
  - {name: cdh, signal: compress_demand, above: 3, below: 1.5, dwell: 15s, cooldown: 60s, level: yellow}
`
	demand := func(v float64) func(int) map[string]float64 {
		return constSig(map[string]float64{SignalCompressDemand: v})
	}
	s := newSim(t, y)
	s.run(6*time.Second, demand(3.5)) // blue after 5 s above (6 samples); cdh is above too
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue", s.levels())
	}
	// Blue drains the queue within 12 s: no yellow, though cdh's signal
	// had been above 3 for 17 s in all.
	s.run(12*time.Second, demand(3.5))
	s.run(time.Minute, demand(1.8))
	if s.levels() != "blue" {
		t.Fatalf("steps %q: yellow before blue could act", s.levels())
	}
	// Blue is not enough: yellow a full dwell after the signal rose at blue.
	s = newSim(t, y)
	s.run(6*time.Second, demand(3.5))
	blueAt := s.now
	s.run(time.Minute, demand(3.5))
	if s.levels() != "blue,yellow" || s.steps[1].Reason != "cdh: compress demand (tasks per worker) 3.5 > 3 for 15 s" {
		t.Fatalf("steps %q (%+v)", s.levels(), s.steps)
	}
	if at := time.UnixMilli(s.mem.LastStepAt); at.Sub(blueAt) != 15*time.Second {
		t.Fatalf("yellow %v after blue, want 15 s", at.Sub(blueAt))
	}
}

// TestShippedPolicyRehearsal runs the shipped policy over the signal
// series of the rehearsal at 19:38 UTC (docs/capacity.md; load 9-12, so a
// photo held a worker about 2 s at normal, 0.45 s at blue): the forecast
// at normal crosses 0.6 early in the ramp, before any queue, so blue; at
// blue the forecast at blue's codec passes 0.7 late in the ramp, so yellow
// 10 s later; yellow holds through the peak, where the forecast swings
// between its thresholds and yellow has emptied the compress queue; after
// the peak it comes down one level at a time. The steady profile's series
// (the forecast at normal between 0.2 and 0.55) never steps. The CPU
// forecast is the arrivals x a task's share of the process's CPU over the
// box's 2 CPUs, as the master computes it: that run predates the CPU
// share, so the share is a loaded box's 1.2 s (0.9-1.3 s,
// TestAutoFlexFalseAlarmSim), 0.6 per upload/s; in the steady series it
// is the 1.47 s a freshly started loaded box read (0.735 per upload/s).
func TestShippedPolicyRehearsal(t *testing.T) {
	s := newSim(t, string(shippedAutoPolicy))
	sig := func(fcNormal, fc, demand, rate float64) func(int) map[string]float64 {
		backlog, queue := 4.0, 3000.0 // below their rules' thresholds
		if demand < 1 {
			backlog, queue = 0, 0
		}
		return constSig(map[string]float64{SignalCompressForecastNormal: fcNormal, SignalCompressForecast: fc,
			SignalCompressDemand: demand, SignalUploadRate: rate, SignalUploadArrivals: rate,
			SignalCompressCPUForecastNormal: rate * 1.2 / 2,
			SignalCompressBacklog:           backlog, SignalCompressQueueP99: queue})
	}
	s.run(20*time.Second, sig(0.4, 0.4, 0.5, 0.5)) // evening
	s.run(3*time.Second, sig(0.66, 0.66, 0.9, 0.6))
	if s.levels() != "" {
		t.Fatalf("steps %q before the dwell", s.levels())
	}
	s.run(time.Second, sig(0.66, 0.66, 0.9, 0.6))
	if s.levels() != "blue" || s.steps[0].Reason != "compress-forecast: compress forecast at normal (worker share) 0.66 > 0.6 for 3 s" {
		t.Fatalf("steps %q (%+v), want blue on the forecast", s.levels(), s.steps)
	}
	// The ramp at blue: normal would be overloaded (1.3), blue's codec
	// keeps up (0.4), the queue normal left drains.
	s.run(20*time.Second, sig(1.3, 0.4, 2.2, 1.7))
	s.run(9*time.Second, sig(1.5, 0.9, 2.8, 3))
	if s.levels() != "blue" {
		t.Fatalf("steps %q: yellow before 10 s", s.levels())
	}
	s.run(2*time.Second, sig(1.7, 1.06, 3.2, 4.2))
	if s.levels() != "blue,yellow" || !strings.HasPrefix(s.steps[1].Reason, "compress-forecast-high: compress forecast (worker share) 1.06 > 0.7 for 10 s") {
		t.Fatalf("steps %q (%+v), want yellow on the forecast at blue", s.levels(), s.steps)
	}
	// The peak at yellow: the forecast swings 0.5-1, the queue is empty.
	s.run(60*time.Second, func(i int) map[string]float64 {
		fc := []float64{0.92, 0.58, 0.51, 0.55, 0.81, 0.68, 0.89, 0.97, 1.04}[i%9]
		return sig(fc*1.6, fc, 0.6, 4.5)(i)
	})
	if s.levels() != "blue,yellow" {
		t.Fatalf("yellow did not hold through the peak: %s", s.levels())
	}
	// After the peak: yellow to blue once the rate stayed under the hold
	// for 30 s, to normal a cooldown later.
	s.run(29*time.Second, sig(0.1, 0.05, 0.5, 0.3))
	if s.levels() != "blue,yellow" {
		t.Fatalf("steps %q, want yellow for the hold's 30 s", s.levels())
	}
	s.run(2*time.Second, sig(0.1, 0.05, 0.5, 0.3))
	if s.levels() != "blue,yellow,blue" {
		t.Fatalf("steps %q, want yellow to blue 30 s after the peak", s.levels())
	}
	s.run(2*time.Minute, sig(0.1, 0.05, 0.5, 0.3))
	if s.levels() != "blue,yellow,blue,normal" {
		t.Fatalf("steps %q, want back to normal", s.levels())
	}
	// Steady: the forecast at normal wanders 0.2-0.55 (a 10 s average of
	// arrivals at 0.5/s, photos of 1-2 s on two workers): no step. The
	// arrivals wander with it (0.29-0.79/s, 1.5x their mean at most) and
	// start from a cluster without traffic: 5 s at 0, then the 10 s
	// average filling.
	s = newSim(t, string(shippedAutoPolicy))
	s.run(5*time.Second, constSig(map[string]float64{SignalUploadArrivals: 0, SignalUploadRate: 0}))
	s.run(10*time.Minute, func(i int) map[string]float64 {
		fc := []float64{0.25, 0.33, 0.54, 0.41, 0.22, 0.31, 0.55, 0.5, 0.38, 0.2, 0.29}[i%11]
		fill := min(1, float64(i+1)/10)
		m := sig(fc*fill, fc*fill, 0.6, 0.5)(i)
		m[SignalUploadArrivals] = fc / 0.7 * fill
		m[SignalCompressCPUForecastNormal] = m[SignalUploadArrivals] * 1.47 / 2
		return m
	})
	if s.levels() != "" {
		t.Fatalf("steady stepped: %s (%+v)", s.levels(), s.steps)
	}
}

// idleSeries is the Spring Festival rehearsal's signals on an idle box
// (docs/capacity.md, the lead's run at 20:54, load 1.2-1.4): the arrivals
// are the 10 s average of the profile's rate (0.5/s for 20 s, a ramp to
// 4.5/s over 40 s, 60 s at 4.5/s, 0.5/s after) with a noise of +-20 %,
// after 5 s of a cluster without traffic; a photo holds a worker 0.5 s at
// normal's codec and 0.1 s at JPEG on two workers. level is the level in
// force (the forecast is at its codec). Second i is i-5 of the profile.
func idleSeries(level func() string) func(int) map[string]float64 {
	rate := func(t int) float64 {
		switch {
		case t < 0:
			return 0
		case t < 20:
			return 0.5
		case t < 60:
			return 0.5 + 4*float64(t-20)/40
		case t < 120:
			return 4.5
		}
		return 0.5
	}
	noise := []float64{1, 1.2, 0.85, 1.1, 0.8, 1.15, 0.95, 1.05, 0.9, 1.2, 0.8}
	return func(i int) map[string]float64 {
		t := i - 5
		a := 0.0
		for k := t - 9; k <= t; k++ {
			a += rate(k) / 10
		}
		a *= noise[i%len(noise)]
		m := map[string]float64{SignalUploadArrivals: a, SignalUploadRate: a, SignalCompressDemand: 0.5}
		if t <= 1 {
			return m // no photo compressed yet: no forecast
		}
		m[SignalCompressForecastNormal] = a * 0.5 / 2
		m[SignalCompressForecast] = a * 0.1 / 2
		if level() == "normal" {
			m[SignalCompressForecast] = m[SignalCompressForecastNormal]
		}
		return m
	}
}

// TestShippedPolicyIdleRamp: on an idle box the forecast at normal
// reaches 0.6 only at 2.4 uploads/s, late in the ramp (blue at 0:48 in
// this series); the arrivals tripling on their level of the minute before
// take blue at 0:37, with the forecast at 0.37. Blue holds through the peak (the rise
// fades, the forecast at normal holds it), yellow never comes (JPEG keeps
// up), and blue steps back once the arrivals fall after the peak.
func TestShippedPolicyIdleRamp(t *testing.T) {
	s := newSim(t, string(shippedAutoPolicy))
	series := idleSeries(func() string { return s.level })
	s.run(5*time.Second+30*time.Second, series)
	if s.levels() != "" {
		t.Fatalf("steps %q by 0:30", s.levels())
	}
	s.run(10*time.Second, func(i int) map[string]float64 { return series(i + 35) })
	if s.levels() != "blue" || !strings.HasPrefix(s.steps[0].Reason, "compress-forecast-rising: compress forecast at normal (worker share) 0.") ||
		!strings.Contains(s.steps[0].Reason, "> 0.3 and upload arrivals ") || !strings.Contains(s.steps[0].Reason, "x over 60 s for 3 s") {
		t.Fatalf("steps %q (%+v), want blue on the rise by 0:40", s.levels(), s.steps)
	}
	var fc, rise float64
	if _, err := fmt.Sscanf(s.steps[0].Reason, "compress-forecast-rising: compress forecast at normal (worker share) %g > 0.3 and upload arrivals", &fc); err != nil || fc >= 0.6 {
		t.Fatalf("reason %q: forecast %v (%v), want under the 0.6 of compress-forecast", s.steps[0].Reason, fc, err)
	}
	if _, err := fmt.Sscanf(s.steps[0].Reason[strings.Index(s.steps[0].Reason, "rising "):], "rising %gx", &rise); err != nil || rise < 3 {
		t.Fatalf("reason %q: rise %v (%v), want >= 3", s.steps[0].Reason, rise, err)
	}
	// Without the rising rule, blue comes on the forecast at normal
	// only, 12 s later.
	pol := testAutoPolicy(t, string(shippedAutoPolicy))
	pol.Rules = slices.DeleteFunc(pol.Rules, func(r AutoRule) bool { return r.RiseSignal != "" })
	flat := &sim{e: newAutoEngine(pol, flex.DefaultPlans()), now: t0, level: "normal"}
	flat.run(5*time.Second+60*time.Second, idleSeries(func() string { return flat.level }))
	if flat.levels() != "blue" || !strings.HasPrefix(flat.steps[0].Reason, "compress-forecast: ") ||
		flat.mem.LastStepAt-s.mem.LastStepAt < (10*time.Second).Milliseconds() {
		t.Fatalf("without the rise: steps %q (%+v) at %v, want blue on the forecast 10 s or more after %v",
			flat.levels(), flat.steps, time.UnixMilli(flat.mem.LastStepAt).Sub(t0), time.UnixMilli(s.mem.LastStepAt).Sub(t0))
	}
	// Through the peak to 2:00 (second 125), then the after phase.
	s.run(125*time.Second-45*time.Second, func(i int) map[string]float64 { return series(i + 45) })
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue through the peak", s.levels())
	}
	// Blue steps back once the arrivals have fallen and the upload rate
	// has stayed under 1/s for the 30 s of compress-demand-high's hold
	// (a rule of yellow, which blue is judged by too).
	s.run(30*time.Second, func(i int) map[string]float64 { return series(i + 125) })
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue for the hold's 30 s", s.levels())
	}
	s.run(30*time.Second, func(i int) map[string]float64 { return series(i + 155) })
	if s.levels() != "blue,normal" || !strings.Contains(s.steps[1].Reason, "compress-forecast-rising: compress forecast at normal (worker share) 0.1") {
		t.Fatalf("steps %q (%+v), want back to normal after the peak", s.levels(), s.steps)
	}
}

// idleRampCPU is the signals the master read each second of the
// rehearsal's auto-flex run at 01:09 UTC 2026-12-02 (docs/capacity.md,
// load 1-4, a signal trace of that run), from 0:03 to 0:40 at normal:
// the arrivals (10 s average; the profile's draws ran low in the evening),
// the forecast over the worker slots, the forecast over the compress
// host's CPUs (a HEIC task's share of the process's CPU was 0.76-0.89 s
// on 2 CPUs, the slots' wall 0.7-0.9 s over 4 slots) and the demand. The
// box's CPUs were full from 0:32 and the compress queue p99 was 0.2-0.9 s
// from 0:33, while the slot forecast read 0.16-0.41.
var idleRampCPU = struct{ arrivals, slots, cpu, demand []float64 }{
	arrivals: []float64{0.50, 0.67, 0.75, 0.80, 0.67, 0.71, 0.75, 0.67, 0.60, 0.60, 0.64, 0.50, 0.40, 0.45, 0.40, 0.40, 0.30, 0.30, 0.36, 0.40, 0.30, 0.27, 0.30, 0.30, 0.30, 0.27, 0.18, 0.36, 0.50, 0.60, 0.90, 1.10, 1.30, 1.37, 1.79, 1.79, 1.99, 1.98},
	slots:    []float64{0.09, 0.12, 0.14, 0.15, 0.12, 0.13, 0.14, 0.13, 0.11, 0.11, 0.12, 0.09, 0.07, 0.08, 0.07, 0.07, 0.06, 0.06, 0.07, 0.08, 0.06, 0.05, 0.06, 0.06, 0.06, 0.05, 0.03, 0.07, 0.10, 0.10, 0.16, 0.20, 0.24, 0.25, 0.33, 0.33, 0.41, 0.41},
	cpu:      []float64{0.19, 0.26, 0.29, 0.31, 0.26, 0.28, 0.30, 0.27, 0.24, 0.24, 0.24, 0.19, 0.15, 0.17, 0.16, 0.16, 0.12, 0.12, 0.14, 0.16, 0.12, 0.11, 0.12, 0.12, 0.12, 0.11, 0.07, 0.15, 0.20, 0.22, 0.33, 0.42, 0.51, 0.52, 0.69, 0.68, 0.83, 0.83},
	demand:   []float64{0.04, 0.11, 0.13, 0.14, 0.15, 0.17, 0.16, 0.18, 0.16, 0.15, 0.15, 0.13, 0.12, 0.12, 0.14, 0.13, 0.16, 0.14, 0.16, 0.16, 0.15, 0.13, 0.12, 0.13, 0.14, 0.12, 0.11, 0.17, 0.17, 0.17, 0.29, 0.39, 0.50, 0.52, 0.58, 0.66, 0.72, 0.76},
}

// TestShippedPolicyIdleRampCPU: on the recorded idle ramp the forecast
// over the host's CPUs passes the CPU rule's 0.7 only at 0:39 (0.83;
// 0.51 at 0:35, 0.69 at 0:37), so the shipped policy takes blue on the
// rising rule at 0:40, as that run did (the shipped policy then had no
// CPU rule), with the forecast over the slots at 0.41. The CPU rule at
// 0.5 for 3 s, shipped in session 10, took it at 0:38 and false-alarmed
// on steady runs (TestAutoFlexFalseAlarmSim). Without the rising rule,
// the CPU rule takes blue 5 s after 0:39, at 0:44, the recorded series
// held at its last second after 0:40 (the ramp goes on rising).
func TestShippedPolicyIdleRampCPU(t *testing.T) {
	n := len(idleRampCPU.cpu)
	series := func(i int) map[string]float64 {
		r := idleRampCPU
		i = min(i, n-1)
		return map[string]float64{SignalUploadArrivals: r.arrivals[i], SignalUploadRate: r.arrivals[i],
			SignalCompressForecastNormal: r.slots[i], SignalCompressForecast: r.slots[i],
			SignalCompressCPUForecastNormal: r.cpu[i], SignalCompressDemand: r.demand[i]}
	}
	s := newSim(t, string(shippedAutoPolicy))
	s.run(time.Duration(n)*time.Second, series)
	if s.levels() != "blue" || !strings.HasPrefix(s.steps[0].Reason, "compress-forecast-rising: compress forecast at normal (worker share) 0.41 > 0.3") {
		t.Fatalf("steps %q (%+v), want blue on the rise", s.levels(), s.steps)
	}
	// Second i of the series is 0:03+i; the step came on the sample of 0:40.
	if at := time.UnixMilli(s.mem.LastStepAt).Sub(t0); at != 38*time.Second {
		t.Fatalf("blue %v into the series, want 38 s (0:40)", at)
	}
	pol := testAutoPolicy(t, string(shippedAutoPolicy))
	pol.Rules = slices.DeleteFunc(pol.Rules, func(r AutoRule) bool { return r.RiseSignal != "" })
	cpu := &sim{e: newAutoEngine(pol, flex.DefaultPlans()), now: t0, level: "normal"}
	cpu.run(time.Duration(n+10)*time.Second, series)
	if cpu.levels() != "blue" || cpu.steps[0].Reason != "compress-cpu-forecast: compress CPU forecast at normal (CPU share) 0.83 > 0.7 for 5 s" ||
		time.UnixMilli(cpu.mem.LastStepAt).Sub(t0) != 42*time.Second {
		t.Fatalf("without the rising rule: steps %q (%+v) at %v, want blue on the CPU forecast at 42 s (0:44)",
			cpu.levels(), cpu.steps, time.UnixMilli(cpu.mem.LastStepAt).Sub(t0))
	}
}

// TestShippedPolicyBurst: a burst does not step. On an idle box (a
// photo holds a worker 0.5 s: the forecast at normal 0.25 per upload/s),
// an album of 9 photos at once lifts the 10 s average of the arrivals
// from 0.5/s to 1.4/s for 10 s: the forecast passes the rising rule's
// 0.3, but the rise is 2.8x. On a loaded box (0.7 per upload/s), a spike
// of 5x for two samples passes every blue threshold for less than the
// dwell.
func TestShippedPolicyBurst(t *testing.T) {
	for _, k := range []float64{0.25, 0.7} {
		s := newSim(t, string(shippedAutoPolicy))
		at := func(a float64) func(int) map[string]float64 {
			return constSig(map[string]float64{SignalUploadArrivals: a, SignalUploadRate: a,
				SignalCompressForecastNormal: k * a, SignalCompressForecast: k * a, SignalCompressDemand: 0.6})
		}
		s.run(2*time.Minute, at(0.5))
		if k < 0.5 {
			s.run(10*time.Second, at(1.4))
		} else {
			s.run(2*time.Second, at(2.5))
		}
		s.run(5*time.Minute, at(0.5))
		if s.levels() != "" {
			t.Fatalf("%v s a photo: a burst stepped: %s (%+v)", k*2, s.levels(), s.steps)
		}
	}
}

const risingPolicy = `
rules:
  - {name: ramp, signal: compress_forecast_normal, above: 0.3, below: 0.2, rising: {signal: upload_arrivals, by: 3, over: 60s}, dwell: 3s, cooldown: 60s, level: blue}
`

// TestAutoRising: a rule with a rising fires on its threshold and its
// rise together, for its dwell; holds while its rise is between its
// thresholds; clears once the rise is flat, however high its signal.
func TestAutoRising(t *testing.T) {
	sig := func(fc, arrivals float64) func(int) map[string]float64 {
		return constSig(map[string]float64{SignalCompressForecastNormal: fc, SignalUploadArrivals: arrivals})
	}
	s := newSim(t, risingPolicy)
	s.run(time.Minute, sig(0.25, 1))
	// The rise alone, the threshold alone: no step.
	s.run(time.Minute, sig(0.28, 5))
	s.run(2*time.Minute, sig(0.25, 1))
	s.run(time.Minute, sig(0.5, 1))
	if s.levels() != "" {
		t.Fatalf("steps %q on one of the two", s.levels())
	}
	// Both: blue after the dwell, the reason with the rise.
	s.run(3*time.Second, sig(0.4, 4))
	if s.levels() != "" {
		t.Fatalf("steps %q before the dwell", s.levels())
	}
	s.run(time.Second, sig(0.4, 4))
	if want := "ramp: compress forecast at normal (worker share) 0.4 > 0.3 and upload arrivals 4/s rising 4x over 60 s for 3 s"; s.levels() != "blue" || s.steps[0].Reason != want {
		t.Fatalf("steps %q (%+v), want blue: %s", s.levels(), s.steps, want)
	}
	// The arrivals stay at 4/s: the level before catches up, the rise
	// falls through 3 (between: blue holds) to 1, flat: clear, normal.
	s.run(65*time.Second, sig(0.4, 4))
	if s.levels() != "blue" {
		t.Fatalf("steps %q, want blue while the rise is over 1", s.levels())
	}
	s.run(10*time.Second, sig(0.4, 4))
	if want := "ramp: upload arrivals 4/s rising 1x <= 1x over 60 s for 3 s"; s.levels() != "blue,normal" || s.steps[1].Reason != want {
		t.Fatalf("steps %q (%+v), want normal: %s", s.levels(), s.steps, want)
	}
	// A rise from nothing is a start: after arrivals at 0, no rise is
	// known until the level before holds 15 s (25 s of samples).
	s = newSim(t, risingPolicy)
	s.run(time.Minute, sig(0.4, 0))
	s.run(40*time.Second, sig(0.4, 4))
	if s.levels() != "" {
		t.Fatalf("steps %q on a start from 0", s.levels())
	}
	if st := s.e.st[0]; !st.riseKnown || st.rise >= 3 {
		t.Fatalf("rise %v (known %v) after the start, want known, under 3", st.rise, st.riseKnown)
	}
}

// TestRateWindow: the mean over the heartbeats of the last 10 s.
func TestRateWindow(t *testing.T) {
	var w rateWindow
	ms := t0.UnixMilli()
	var got float64
	// 0.25 uploads/s in 1 s heartbeat windows: 0, 0, 0, 1, ...
	for i := 0; i < 40; i++ {
		r := 0.0
		if i%4 == 3 {
			r = 1
		}
		got = w.add(ms+int64(i)*1000, r)
		if i >= 9 && (got < 0.2 || got > 0.3) {
			t.Fatalf("heartbeat %d: mean %v, want 0.2-0.3", i, got)
		}
	}
	// The same heartbeat seen twice (the master samples every 500 ms)
	// counts once.
	if again := w.add(ms+39*1000, 1); again != got {
		t.Fatalf("same heartbeat again: %v, want %v", again, got)
	}
	if len(w.at) > 11 {
		t.Fatalf("window holds %d heartbeats, want <= 11", len(w.at))
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
		{rule(", signal: forecast"), "rules[0].signal: unknown signal \"forecast\" (signals: compress_backlog, compress_cpu_forecast_normal, compress_demand, compress_forecast,"},
		{"rules:\n  - {name: f, signal: compress_forecast_normal, above: 0.6, below: 0.6, dwell: 3s, level: blue}", "rules[0].below: 0.6 must be under above (0.6)"},
		{"rules:\n  - {name: f, signal: compress_forecast, above: -0.5, below: 0, dwell: 3s, level: yellow}", "rules[0].above: required, a number >= 0"},
		{"rules:\n  - {name: a, signal: compress_backlog, below: 1, dwell: 1s, level: blue}", "rules[0].above: required"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 6, dwell: 1s, level: blue}", "rules[0].below: 6 must be under above (5)"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, level: blue}", "rules[0].dwell: required"},
		{rule(", cooldown: -1s"), "rules[0].cooldown: \"-1s\" is not a duration"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: normal}", "rules[0].level: normal is the lowest level"},
		{rule("") + "  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue}", "rules[1].name: \"a\" used twice"},
		{rule("") + "colour: red\n", "field colour not found"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, hold: {signal: cpu, below: 1}}", "rules[0].hold.signal: unknown signal \"cpu\""},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, hold: {signal: compress_backlog, below: 1}}", "rules[0].hold.signal: compress_backlog is the rule's own signal"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, hold: {signal: upload_rate}}", "rules[0].hold.below: required"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, hold: {signal: upload_rate, below: 0}}", "rules[0].hold.below: required, a number > 0"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, hold: {signal: upload_rate, below: 1, above: 2}}", "field above not found"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {signal: cpu, by: 3, over: 60s}}", "rules[0].rising.signal: unknown signal \"cpu\""},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {over: 60s}}", "rules[0].rising.by: required, a number > 1"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 1, over: 60s}}", "rules[0].rising.by: required, a number > 1"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 3, below: 3, over: 60s}}", "rules[0].rising.below: 3 must be over 0 and under by (3)"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 3, below: 0, over: 60s}}", "rules[0].rising.below: 0 must be over 0"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 3}}", "rules[0].rising.over: required, a duration > 0"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 3, over: 5s}}", "rules[0].rising.over: 5s is shorter than the 10 s of the signals' own averages"},
		{"rules:\n  - {name: a, signal: compress_backlog, above: 5, below: 1, dwell: 1s, level: blue, rising: {by: 3, over: 60s, above: 2}}", "field above not found"},
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
