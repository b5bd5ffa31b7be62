package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"willow/flex"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// autoDoc is the auto-flex part of the flex document.
type autoDoc struct {
	Mode          string `json:"mode,omitempty"` // "" is off
	ChangedBy     string `json:"changed_by,omitempty"`
	ChangedAt     int64  `json:"changed_at_unix_ms,omitempty"`
	PausedUntil   int64  `json:"paused_until_unix_ms,omitempty"`
	PausedBy      string `json:"paused_by,omitempty"`
	PausedReason  string `json:"paused_reason,omitempty"`
	Proposal      string `json:"proposal,omitempty"`
	ProposalFrom  string `json:"proposal_from,omitempty"`
	ProposalLevel string `json:"proposal_level,omitempty"`
	ProposalAt    int64  `json:"proposal_at_unix_ms,omitempty"`
	autoMemory
}

func (a autoDoc) mode() string {
	if a.Mode == "" {
		return AutoOff
	}
	return a.Mode
}

func (a autoDoc) paused(now int64) bool { return a.PausedUntil > now }

// proposalRepeat is how long a dry-run proposal of the same step stands
// before it is proposed (and audited) again.
const proposalRepeat = 5 * time.Minute

// autoState is the master's auto-flex part.
type autoState struct {
	autoPol    *AutoPolicy
	autoPolErr error      // why auto-flex cannot be switched on
	autoMu     sync.Mutex // guards autoEng and autoSig
	autoEng    *autoEngine
	autoSig    map[string]float64 // the last sample
	edgeOut    map[string]edgeSample
	windows    map[string]*rateWindow // node id + "/" + signal -> the node's last heartbeats' rates
	// The image codecs in force by region and group under the flex state
	// codecSnap (signalsFrom's cache), and the lowest level's (initFlex).
	codecSnap   *willowv1.FlexState
	codecs      map[[2]string]string
	normalCodec string
	// signals, when set (tests), replaces sampleSignals.
	signals func() map[string]float64
}

// signalWindow is the moving window of the per-second rates a node
// reports for one heartbeat window each (uploads/s, store writes/s): at
// 0.25 uploads/s most 1 s windows count 0 and the next one 4.
const signalWindow = 10 * time.Second

// rateWindow is one node's rate over its heartbeats of the last
// signalWindow.
type rateWindow struct {
	at   []int64 // heartbeat unix ms
	rate []float64
}

// add records the rate of the heartbeat at ms (once per heartbeat) and
// returns the mean over the window ending at ms.
func (w *rateWindow) add(ms int64, rate float64) float64 {
	if n := len(w.at); n == 0 || ms > w.at[n-1] {
		w.at, w.rate = append(w.at, ms), append(w.rate, rate)
	}
	drop := 0
	for drop < len(w.at)-1 && w.at[drop] <= ms-signalWindow.Milliseconds() {
		drop++
	}
	w.at, w.rate = w.at[drop:], w.rate[drop:]
	sum := 0.0
	for _, r := range w.rate {
		sum += r
	}
	return sum / float64(len(w.rate))
}

// spans reports whether the window's heartbeats reach back d from its
// last one.
func (w *rateWindow) spans(d time.Duration) bool {
	return len(w.at) > 0 && w.at[len(w.at)-1]-w.at[0] >= d.Milliseconds()
}

// windowed is the mean of a node's heartbeat rate over signalWindow. Under
// autoMu.
func (s *Server) windowed(e *entry, signal string, rate float64, seen map[string]bool) float64 {
	return s.window(e, signal, seen).add(e.lastMs, rate)
}

// window is a node's rateWindow for signal. Under autoMu.
func (s *Server) window(e *entry, signal string, seen map[string]bool) *rateWindow {
	k := e.info.GetId() + "/" + signal
	seen[k] = true
	w := s.windows[k]
	if w == nil {
		w = &rateWindow{}
		s.windows[k] = w
	}
	return w
}

type edgeSample struct {
	bytes int64
	at    int64 // heartbeat unix ms
	rate  float64
}

// initAuto loads the policy (Config.AutoFlexPolicy, else the shipped one).
func (s *Server) initAuto() error {
	pol, err := DefaultAutoPolicy(s.plans)
	if err != nil && s.cfg.AutoFlexPolicy == "" {
		// Custom levels the shipped policy does not fit: auto-flex cannot
		// be switched on until the master gets a policy of its own.
		s.autoPolErr = fmt.Errorf("the shipped auto-flex policy does not fit this master's levels (%v): configure a policy file", err)
		s.log.Warn("auto-flex unavailable", "err", s.autoPolErr)
		pol = &AutoPolicy{Ceiling: s.plans.Levels()[0]}
	}
	if s.cfg.AutoFlexPolicy != "" {
		data, err := os.ReadFile(s.cfg.AutoFlexPolicy)
		if err != nil {
			return fmt.Errorf("master: auto-flex policy: %w", err)
		}
		if pol, err = LoadAutoPolicy(data, s.plans); err != nil {
			return fmt.Errorf("master: %s: %w", s.cfg.AutoFlexPolicy, err)
		}
	}
	s.autoPol = pol
	s.autoEng = newAutoEngine(pol, s.plans)
	s.edgeOut = map[string]edgeSample{}
	s.windows = map[string]*rateWindow{}
	return nil
}

// pauseAuto returns a with a manual-override pause by actor, when
// auto-flex is on or in dry-run.
func (s *Server) pauseAuto(a autoDoc, actor, reason string, now int64) autoDoc {
	if s.autoPol == nil || a.mode() == AutoOff || actor == AutoFlexActor || s.autoPol.ManualHold <= 0 {
		return a
	}
	a.PausedUntil = now + s.autoPol.ManualHold.Milliseconds()
	a.PausedBy, a.PausedReason = actor, reason
	return a
}

// runAuto samples the signals every autoTick on every master (so a new
// leader's dwell timers are warm), and on the leader only applies due
// scheduled changes and the policy's steps, until ctx is done.
func (s *Server) runAuto(ctx context.Context) {
	t := time.NewTicker(autoTick)
	defer t.Stop()
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.autoOnce(ctx); err != nil && ctx.Err() == nil && s.now().Sub(lastLog) >= 10*time.Second {
			lastLog = s.now()
			s.log.Warn("auto-flex", "err", err)
		}
	}
}

// autoOnce is one tick of runAuto.
func (s *Server) autoOnce(ctx context.Context) error {
	now := s.now()
	var sig map[string]float64
	var err error
	if s.signals != nil {
		sig = s.signals()
	} else if sig, err = s.sampleSignals(ctx); err != nil {
		return err
	}
	s.autoMu.Lock()
	s.autoSig = sig
	s.autoEng.observe(now, sig)
	s.autoMu.Unlock()
	if !s.isLeader() {
		return nil
	}
	if err := s.applyDueSchedules(ctx); err != nil {
		return err
	}
	return s.autoStepOnce(ctx, now)
}

// autoStepOnce asks the policy for a step and takes (or, in dry-run,
// proposes) it.
func (s *Server) autoStepOnce(ctx context.Context, now time.Time) error {
	d, _, _ := s.current()
	mode := d.Auto.mode()
	if mode == AutoOff || d.Auto.paused(now.UnixMilli()) {
		return nil
	}
	cur := d.Setting.Global.Level
	s.autoMu.Lock()
	step, ok := s.autoEng.decide(now, cur, d.Auto.autoMemory)
	s.autoMu.Unlock()
	if !ok {
		return nil
	}
	if mode == AutoDryRun && d.Auto.ProposalLevel == step.Level && d.Auto.ProposalFrom == levelName(cur) &&
		now.Sub(time.UnixMilli(d.Auto.ProposalAt)) < proposalRepeat {
		return nil
	}
	ms := now.UnixMilli()
	_, _, err := s.commit(ctx, func(c flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		// Decided on d: act only if nothing changed since (another
		// master's step, a human, a mode change).
		if c.Setting.Global.Level != cur || c.Auto.mode() != mode || c.Auto.paused(ms) || c.Auto.LastStepAt != d.Auto.LastStepAt {
			return c, nil, errNothingDue
		}
		nd := c
		if mode == AutoDryRun {
			nd.Auto.Proposal = fmt.Sprintf("auto-flex would set %s: %s", step.Level, step.Reason)
			nd.Auto.ProposalFrom, nd.Auto.ProposalLevel, nd.Auto.ProposalAt = levelName(cur), step.Level, ms
			return nd, &willowv1.AuditEntry{Actor: AutoFlexActor, Action: "propose", Reason: nd.Auto.Proposal}, nil
		}
		set := c.Setting.Clone()
		set.Global.Level = step.Level // overrides and staged rollouts stay
		prev := c.Setting.Clone()
		nd.Setting, nd.Prev = set, &prev
		nd.Actor, nd.Reason, nd.ChangedAt = AutoFlexActor, step.Reason, ms
		nd.Auto.stepped(ms, step)
		nd.Auto.Proposal, nd.Auto.ProposalFrom, nd.Auto.ProposalLevel, nd.Auto.ProposalAt = "", "", "", 0
		return nd, &willowv1.AuditEntry{Actor: AutoFlexActor, Action: "set", Reason: step.Reason}, nil
	})
	if errors.Is(err, errNothingDue) {
		return nil
	}
	return err
}

func levelName(l string) string {
	if l == "" {
		return "normal"
	}
	return l
}

// sampleSignals reads the signals from the live nodes' last heartbeats. A
// signal no live node reports is absent.
func (s *Server) sampleSignals(ctx context.Context) (map[string]float64, error) {
	v, err := s.cached(ctx)
	if err != nil {
		return nil, err
	}
	return s.signalsFrom(s.now(), v.entries, s.flexSnapshot()), nil
}

// signalsFrom computes the signals at now from the nodes' entries (their
// last heartbeats) and the flex state snap: sampleSignals without the
// registry read, so a test can feed it heartbeats on an injected clock.
// It keeps the nodes' rate windows between calls.
func (s *Server) signalsFrom(now time.Time, entries []*entry, snap *willowv1.FlexState) map[string]float64 {
	budget := float64(flex.DefaultStoreWriteBudget)
	if k := snap.GetKnobs(); k != nil {
		if b, err := parseFloat(k[flex.KnobStoreWriteBudget]); err == nil && b > 0 {
			budget = b
		}
	}
	sig := map[string]float64{}
	maxIn := func(name string, x float64) {
		if old, ok := sig[name]; !ok || x > old {
			sig[name] = x
		}
	}
	sum := func(name string, x float64) { sig[name] += x }
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	seen := map[string]bool{}
	defer func() {
		for k := range s.windows {
			if !seen[k] {
				delete(s.windows, k) // a node gone or dead
			}
		}
	}()
	fc := &forecast{normalCodec: s.normalCodec}
	cf := &cpuForecast{codec: fc.normalCodec, regions: map[string]*regionCPU{}}
	// The image codec in force, by region and group: one flex.Effective
	// (which walks the knobs by reflection) a group a flex state, not one
	// a compress node a sample.
	if s.codecs == nil || s.codecSnap != snap {
		s.codecs, s.codecSnap = map[[2]string]string{}, snap
	}
	codecOf := func(e *entry) string {
		k := [2]string{e.info.GetRegion(), e.info.GetGroup()}
		c, ok := s.codecs[k]
		if !ok {
			c = string(flex.Effective(snap, k[0], k[1]).ImageCodec)
			s.codecs[k] = c
		}
		return c
	}
	for _, e := range entries {
		if !e.alive(now, s.cfg.MissedAfter) {
			continue
		}
		l := e.load
		switch e.info.GetRole() {
		case "compress":
			fc.add(l, codecOf(e))
			cf.add(e, l)
			p99 := l.GetQueueP99Ms()
			if p99 == 0 {
				p99 = l.GetQueueMs() // a node that does not report the p99
			}
			maxIn(SignalCompressQueueP99, p99)
			sum(SignalCompressBacklog, float64(l.GetBacklog()))
			maxIn(SignalCompressDemand, l.GetCompressDemand())
		case "upload":
			sum(SignalUploadInFlight, float64(l.GetInFlight()))
			shed := 0.0
			if a := l.GetAdmitFraction(); a > 0 {
				shed = 1 - a
			}
			maxIn(SignalUploadShed, shed)
			maxIn(SignalStoreWriteRatio, s.windowed(e, SignalStoreWriteRatio, l.GetStoreWritesPerS(), seen)/budget)
			if g := l.GetGauges(); g != nil {
				r := cf.region(e.info.GetRegion())
				if ok, has := g[node.GaugeUploadsPerS]; has {
					rate := s.windowed(e, SignalUploadRate, ok+g[node.GaugeUploadFailuresPerS], seen)
					sum(SignalUploadRate, rate)
					r.rate, r.hasRate = r.rate+rate, true
				}
				if begun, has := g[node.GaugeUploadsBegunPerS]; has {
					w := s.window(e, SignalUploadArrivals, seen)
					a := w.add(e.lastMs, begun)
					sum(SignalUploadArrivals, a)
					r.arrivals, r.hasArrivals = r.arrivals+a, true
					// A front's first heartbeats are no average: one
					// upload in the first second reads 1/s.
					r.young = r.young || !w.spans(signalWindow/2)
				}
			}
		case "edgecache":
			sum(SignalEdgeBytesOut, s.edgeRate(e))
		case "timeline":
			sum(SignalTimelineHeld, l.GetGauges()["held_items"])
		}
	}
	// The arrivals lead: when compress falls behind, the fronts finish
	// uploads late, so the finished rate lags the clients.
	if rate, ok := sig[SignalUploadArrivals]; ok {
		fc.signals(sig, rate)
	} else if rate, ok := sig[SignalUploadRate]; ok {
		fc.signals(sig, rate) // fronts that do not report arrivals
	}
	cf.signals(sig)
	return sig
}

// cpuForecast is compress_cpu_forecast_normal, region by region: the
// uploads arriving at a region's fronts times the CPU seconds an image
// task takes at the lowest level's codec on the region's compress nodes,
// over the CPUs of the hosts those nodes run on. 1 means the arrivals
// would keep every one of those CPUs busy. The fronts send a region's
// photos to the region's compress nodes (Route's primary list), so each
// region is judged by its own; the signal is the highest region's. It
// counts what the slot forecast (forecast) cannot: a slot is not a CPU.
// A task's resize and x265 encode run on several threads, and where
// compress shares its host with other roles (one box), or runs more slots
// than the host has cores, every slot busy is more CPU than there is:
// tasks stretch and queue well before the slots are all held.
type cpuForecast struct {
	codec   string
	regions map[string]*regionCPU
}

// regionCPU is one region's part of cpuForecast.
type regionCPU struct {
	secs, weight float64            // CPU seconds per task, weighted by the nodes' slots
	hosts        map[string]float64 // host -> the most CPUs one of its compress nodes may use
	arrivals     float64            // the fronts' new uploads per second, 10 s average
	rate         float64            // the fronts' finished uploads per second (fronts without arrivals)
	hasArrivals  bool
	hasRate      bool
	young        bool // a front's arrivals window holds under signalWindow/2 of heartbeats
}

func (f *cpuForecast) region(name string) *regionCPU {
	r := f.regions[name]
	if r == nil {
		r = &regionCPU{hosts: map[string]float64{}}
		f.regions[name] = r
	}
	return r
}

// add counts one live compress node: its CPUs, once per host (a node
// that names no host is a host of its own), and its CPU seconds per task
// at the codec, where it has measured them.
func (f *cpuForecast) add(e *entry, l *willowv1.Load) {
	cpus := l.GetUsableCpus()
	if cpus <= 0 {
		return // a node that does not report its CPUs
	}
	r := f.region(e.info.GetRegion())
	host := l.GetHost()
	if host == "" {
		host = "node:" + e.info.GetId()
	}
	r.hosts[host] = max(r.hosts[host], cpus)
	if c := l.GetImageTaskCpuSeconds()[f.codec]; c > 0 {
		w := max(float64(l.GetCompressWorkers()), 1)
		r.secs += w * c
		r.weight += w
	}
}

// signals sets compress_cpu_forecast_normal to the highest region's
// forecast; absent where no region has both a measured cost and fronts
// that report their uploads, each with 5 s of heartbeats at least.
func (f *cpuForecast) signals(sig map[string]float64) {
	for _, r := range f.regions {
		cpus := 0.0
		for _, c := range r.hosts {
			cpus += c
		}
		rate, ok := r.arrivals, r.hasArrivals
		if !ok {
			rate, ok = r.rate, r.hasRate
		}
		if cpus == 0 || r.weight == 0 || !ok || r.young {
			continue
		}
		v := rate * r.secs / r.weight / cpus
		if old, has := sig[SignalCompressCPUForecastNormal]; !has || v > old {
			sig[SignalCompressCPUForecastNormal] = v
		}
	}
}

// forecast sums what the compress nodes' heartbeats say about their
// capacity: worker slots, and seconds a slot is held per image task at the
// codec each runs now and at the lowest level's codec, weighted by the
// node's slots.
type forecast struct {
	normalCodec string
	workers     float64
	now, normal struct{ secs, weight float64 }
}

// normalCodec is the image codec of the lowest level's plan.
func normalCodec(plans *flex.Plans) string {
	if p, err := plans.Plan(plans.Levels()[0]); err == nil && p[flex.KnobImageCodec] != "" {
		return p[flex.KnobImageCodec]
	}
	return string(flex.DefaultImageCodec)
}

// add counts one live compress node that runs image codec codec.
func (f *forecast) add(l *willowv1.Load, codec string) {
	w := float64(l.GetCompressWorkers())
	if w <= 0 {
		return // a node that does not report its slots
	}
	f.workers += w
	if v, ok := taskSeconds(l, codec, codec); ok {
		f.now.secs += w * v
		f.now.weight += w
	}
	if v, ok := taskSeconds(l, f.normalCodec, codec); ok {
		f.normal.secs += w * v
		f.normal.weight += w
	}
}

// taskSeconds is how long a task of codec c would hold one of the node's
// slots now, when the node runs codec cur: its measured wall seconds for
// c = cur; else c's CPU seconds (what the codec costs wherever it runs)
// stretched by cur's wall over CPU (how much the box stretches a task
// now, from tasks run now); else c's last wall seconds.
func taskSeconds(l *willowv1.Load, c, cur string) (float64, bool) {
	wall, cpu := l.GetImageTaskSeconds(), l.GetImageTaskCpuSeconds()
	if c != cur && cpu[c] > 0 && cpu[cur] > 0 && wall[cur] > 0 {
		return cpu[c] * wall[cur] / cpu[cur], true
	}
	v, ok := wall[c]
	return v, ok && v > 0
}

// signals sets the forecasts for uploads arriving at rate/s, where the
// nodes have measured the codec's cost (a codec no node has run yet has no
// forecast: absent, it counts as clear).
func (f *forecast) signals(sig map[string]float64, rate float64) {
	if f.workers == 0 {
		return
	}
	if f.now.weight > 0 {
		sig[SignalCompressForecast] = rate * f.now.secs / f.now.weight / f.workers
	}
	if f.normal.weight > 0 {
		sig[SignalCompressForecastNormal] = rate * f.normal.secs / f.normal.weight / f.workers
	}
}

// edgeRate is an edge node's response bytes/s: its own figure, else the
// rate of its cumulative net_bytes_out between heartbeats. Under autoMu.
func (s *Server) edgeRate(e *entry) float64 {
	if r := e.load.GetBytesOutPerS(); r > 0 {
		return r
	}
	id, b := e.info.GetId(), e.load.GetNetBytesOut()
	old, ok := s.edgeOut[id]
	if ok && e.lastMs == old.at {
		return old.rate
	}
	ns := edgeSample{bytes: b, at: e.lastMs}
	if ok && e.lastMs > old.at && b >= old.bytes {
		ns.rate = float64(b-old.bytes) / (float64(e.lastMs-old.at) / 1000)
	}
	s.edgeOut[id] = ns
	return ns.rate
}

func parseFloat(v string) (float64, error) {
	var f float64
	_, err := fmt.Sscan(v, &f)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("not a number: %q", v)
	}
	return f, nil
}

// GetFlexAuto returns the auto-flex state: mode, pause, the last step or
// dry-run proposal, every rule with its signal's last value, and the master
// that acts.
func (s *Server) GetFlexAuto(ctx context.Context, _ *willowv1.GetFlexAutoRequest) (*willowv1.FlexAutoStatus, error) {
	rctx, cancel := context.WithTimeout(ctx, getFlexReadTimeout)
	defer cancel()
	if err := s.reloadFlex(rctx); err != nil {
		s.log.Warn("flex auto: serving the local copy", "err", err)
	}
	st := s.autoStatus()
	if id, err := s.rdb.Get(rctx, s.key("leader")).Result(); err == nil {
		st.Leader = id
	} else if !errors.Is(err, redis.Nil) {
		s.log.Warn("flex auto: read leader", "err", err)
	}
	return st, nil
}

// autoStatus renders the local auto-flex state.
func (s *Server) autoStatus() *willowv1.FlexAutoStatus {
	d, _, _ := s.current()
	now := s.now()
	a := d.Auto
	st := &willowv1.FlexAutoStatus{
		Mode: a.mode(), Ceiling: s.autoPol.Ceiling, HoldMs: s.autoPol.ManualHold.Milliseconds(),
		Proposal: a.Proposal, ProposalAtUnixMs: a.ProposalAt, LastStep: a.LastStep, LastStepAtUnixMs: a.LastStepAt,
		ChangedBy: a.ChangedBy, ChangedAtUnixMs: a.ChangedAt,
	}
	if a.paused(now.UnixMilli()) {
		st.PausedUntilUnixMs, st.PausedBy, st.PausedReason = a.PausedUntil, a.PausedBy, a.PausedReason
	}
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	st.Signals = maps.Clone(s.autoSig)
	for _, r := range s.autoEng.ruleStates(now) {
		rs := &willowv1.AutoRuleStatus{Name: r.rule.Name, Signal: r.rule.Signal, Level: r.rule.Level,
			Above: r.rule.Above, Below: r.rule.Below, DwellMs: r.rule.Dwell.Milliseconds(),
			CooldownMs: r.rule.Cooldown.Milliseconds(), Value: r.value, State: r.state,
			HoldSignal: r.rule.HoldSignal, HoldBelow: r.rule.HoldBelow, HoldValue: r.holdValue}
		if !r.since.IsZero() {
			rs.SinceUnixMs = r.since.UnixMilli()
		}
		st.Rules = append(st.Rules, rs)
	}
	return st
}

// SetFlexAuto sets the auto-flex mode (on, off, dry-run). Setting on or
// dry-run, or resume, ends a manual-override pause. Needs on-call; audited
// as action "auto". Errors: INVALID_ARGUMENT unknown_mode, the SetFlex
// ones for auth and Redis.
func (s *Server) SetFlexAuto(ctx context.Context, req *willowv1.SetFlexAutoRequest) (*willowv1.FlexAutoStatus, error) {
	mode := req.GetMode()
	reason := req.GetReason()
	actor, err := s.authorize(ctx, req.GetToken(), "auto", "", reason)
	if err != nil {
		return nil, err
	}
	switch mode {
	case AutoOn, AutoOff, AutoDryRun:
	case "":
		if !req.GetResume() {
			return nil, rpcstatus.New(codes.InvalidArgument, ReasonUnknownMode, "give a mode (on, off, dry-run) or resume")
		}
	default:
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonUnknownMode, "auto-flex mode %q: want on, off or dry-run", mode)
	}
	if s.autoPolErr != nil && mode != AutoOff {
		return nil, rpcstatus.New(codes.FailedPrecondition, ReasonNoPolicy, "%v", s.autoPolErr)
	}
	_, _, err = s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		nd := cur
		m := mode
		if m == "" {
			m = cur.Auto.mode()
		}
		what := fmt.Sprintf("auto-flex %s (was %s)", m, cur.Auto.mode())
		if cur.Auto.paused(s.now().UnixMilli()) && (m != AutoOff || req.GetResume()) {
			what += ", pause by " + cur.Auto.PausedBy + " ended"
		}
		nd.Auto.Mode, nd.Auto.ChangedBy, nd.Auto.ChangedAt = m, actor, s.now().UnixMilli()
		if m != AutoOff || req.GetResume() {
			nd.Auto.PausedUntil, nd.Auto.PausedBy, nd.Auto.PausedReason = 0, "", ""
		}
		if m != AutoDryRun {
			nd.Auto.Proposal, nd.Auto.ProposalFrom, nd.Auto.ProposalLevel, nd.Auto.ProposalAt = "", "", "", 0
		}
		r := what
		if reason != "" {
			r += ": " + reason
		}
		return nd, &willowv1.AuditEntry{Actor: actor, Action: "auto", Reason: r}, nil
	})
	if err != nil {
		return nil, flexStatus(err)
	}
	return s.autoStatus(), nil
}

// AutoSummary is one line for status displays: "on", "dry-run: auto-flex
// would set yellow: ...", "on, paused until 14:05 by alice".
func AutoSummary(st *willowv1.FlexAutoStatus) string {
	var b strings.Builder
	b.WriteString(st.GetMode())
	if st.GetPausedUntilUnixMs() != 0 {
		fmt.Fprintf(&b, ", paused until %s by %s (manual change: %s)",
			time.UnixMilli(st.GetPausedUntilUnixMs()).UTC().Format(time.RFC3339), st.GetPausedBy(), st.GetPausedReason())
	}
	if st.GetMode() == AutoDryRun && st.GetProposal() != "" {
		b.WriteString("; " + st.GetProposal())
	}
	if st.GetLastStep() != "" {
		fmt.Fprintf(&b, "; last step %s at %s", st.GetLastStep(), time.UnixMilli(st.GetLastStepAtUnixMs()).UTC().Format(time.RFC3339))
	}
	return b.String()
}
