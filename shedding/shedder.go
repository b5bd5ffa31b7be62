package shedding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"willow/flex"
	"willow/rpcstatus"
)

// Defaults of Config.
const (
	DefaultQueueThreshold = 20 * time.Millisecond
	DefaultWindow         = time.Second
	DefaultWindowRequests = 2000
	DefaultMaxInFlight    = 64
	DefaultMaxWait        = 500 * time.Millisecond
	// DefaultUserKey is the development key of the user-priority hash.
	// Production configs set their own.
	DefaultUserKey = "willow-dev-user-priority-key"

	// UserLevels is the number of user priority levels (0 = highest).
	UserLevels = 128
	// CutRatio is the fraction of admitted load kept after an overloaded
	// window; RaiseRatio the growth allowed after a calm one.
	CutRatio   = 0.95
	RaiseRatio = 1.01
	// KnobRefresh is how often the shedder re-reads Deps.Knobs.
	KnobRefresh = 100 * time.Millisecond
	// RetryAfterOverload and RetryAfterShedRatio are the retry-after hints
	// of the two rejection reasons.
	RetryAfterOverload  = time.Second
	RetryAfterShedRatio = 10 * time.Second
)

// DefaultPriorities is the business priority table used when
// Config.Priorities is nil (1 = highest): flex's business table.
func DefaultPriorities() map[string]int { return flex.Priorities() }

// Config configures a Shedder. The zero value means the defaults.
type Config struct {
	// Priorities maps business to priority, 1 = highest; default
	// DefaultPriorities. Unknown or missing businesses rank below all.
	Priorities map[string]int
	// QueueThreshold: the node is overloaded when the mean queueing time
	// over the window exceeds it; default DefaultQueueThreshold.
	QueueThreshold time.Duration
	// Window is the measurement window; default DefaultWindow. A window
	// also ends after DefaultWindowRequests requests.
	Window time.Duration
	// MaxInFlight is the number of concurrency slots; requests wait for a
	// slot (higher priority first) and that wait is the queueing time;
	// default DefaultMaxInFlight.
	MaxInFlight int
	// MaxWait: a request waiting longer for a slot is rejected `overload`;
	// default DefaultMaxWait.
	MaxWait time.Duration
	// UserKey keys the hourly user-priority hash; default DefaultUserKey.
	UserKey []byte
	// Methods are method classes known at construction (the node's own:
	// health, reflection); services add theirs with Declare. A method
	// not listed is Admitted.
	Methods Classes
}

// Deps are the Shedder's dependencies; all optional.
type Deps struct {
	// Knobs returns the live flex knobs (shed_ratio); default flex.Defaults.
	Knobs func() flex.Knobs
	// Registerer receives the metrics; default a private registry.
	Registerer prometheus.Registerer
	// Now; default the wall clock, read as the wall time of an anchor
	// taken every window plus the monotonic time since it (one clock
	// read a call; see monoClock).
	Now func() time.Time
	// Rand draws the user priority of requests without a user ID; default
	// math/rand/v2.
	Rand func() uint64
}

// ErrConfig wraps every configuration error New returns.
var ErrConfig = errors.New("shedding: invalid config")

// Shedder is one node's admission policy. Its methods are safe for
// concurrent use.
type Shedder struct {
	cfg       Config
	prio      map[string]int
	nBiz      int // priority of unknown businesses (= lowest)
	maxLevel  int32
	hash      UserHash
	knobsFn   func() flex.Knobs
	now       func() time.Time
	clock     *monoClock // the default now; nil when Deps.Now is set
	rnd       func() uint64
	classes   atomic.Pointer[Classes] // replaced whole by Declare, under classMu
	classMu   sync.Mutex
	slots     *slots
	metrics   *metrics
	errShed   error
	errOver   error
	threshold int64 // ns
	window    int64 // ns

	level     atomic.Int32
	hist      []atomic.Int64 // requests offered to adaptive admission by key, this window
	winCount  atomic.Int64
	winEnd    atomic.Int64  // unix ns
	queueSum  atomic.Int64  // ns waited for slots, this window
	queueN    atomic.Int64  // requests that waited for their slot, this window
	fastSeen  uint64        // guarded by rollMu: the sum of biz[].fast at the last roll
	lastQueue atomic.Uint64 // float64 bits: mean queueing ms of the last window
	lastRoll  atomic.Int64  // unix ns of the last roll
	rollMu    sync.Mutex    // held while a window is rolled
	counts    []int64       // guarded by rollMu: scratch histogram
	biz       []bizCount    // by business index: the admission counters
	levelMD   []metadata.MD // header metadata for each level, read-only
	release   func()        // s.slots.release, made once (a method value allocates)
	// announceUntil (unix ns) is when the level header may stop after the
	// level was last below the top: see gate.
	announceUntil atomic.Int64

	knobs      atomic.Pointer[cachedKnobs]
	knobsMu    sync.Mutex // held while knobs are stored
	knobsStamp atomic.Int64
}

// cachedKnobs is what admission reads per request, made once per knob
// change: one map read gives a business's priority and shed ratio.
type cachedKnobs struct {
	biz map[string]bizKnobs
}

type bizKnobs struct {
	prio  int     // 1 = highest; the Shedder's nBiz for unknown businesses
	ratio float64 // shed_ratio
}

// New validates cfg and builds a Shedder. Errors wrap ErrConfig.
func New(cfg Config, deps Deps) (*Shedder, error) {
	if cfg.Priorities == nil {
		cfg.Priorities = DefaultPriorities()
	}
	if cfg.QueueThreshold == 0 {
		cfg.QueueThreshold = DefaultQueueThreshold
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if len(cfg.UserKey) == 0 {
		cfg.UserKey = []byte(DefaultUserKey)
	}
	switch {
	case cfg.QueueThreshold < 0, cfg.Window < 0, cfg.MaxWait < 0:
		return nil, fmt.Errorf("%w: negative duration", ErrConfig)
	case cfg.MaxInFlight < 0:
		return nil, fmt.Errorf("%w: MaxInFlight %d", ErrConfig, cfg.MaxInFlight)
	}
	s := &Shedder{
		cfg:       cfg,
		prio:      make(map[string]int, len(cfg.Priorities)),
		knobsFn:   deps.Knobs,
		now:       deps.Now,
		rnd:       deps.Rand,
		slots:     newSlots(cfg.MaxInFlight),
		threshold: int64(cfg.QueueThreshold),
		window:    int64(cfg.Window),
	}
	maxP := 0
	for b, p := range cfg.Priorities {
		if p < 1 || p > 64 {
			return nil, fmt.Errorf("%w: priority of %q is %d, want 1..64", ErrConfig, b, p)
		}
		s.prio[b] = p
		maxP = max(maxP, p)
	}
	s.nBiz = maxP + 1
	s.maxLevel = int32(s.nBiz*UserLevels - 1)
	s.hist = make([]atomic.Int64, s.nBiz*UserLevels)
	s.counts = make([]int64, s.nBiz*UserLevels)
	s.biz = make([]bizCount, s.nBiz)
	s.levelMD = make([]metadata.MD, s.nBiz*UserLevels)
	for i := range s.levelMD {
		s.levelMD[i] = metadata.Pairs(HeaderAdmitLevel, strconv.Itoa(i))
	}
	s.level.Store(s.maxLevel)
	s.release = s.slots.release
	s.hash = NewUserHash(cfg.UserKey)
	s.classes.Store(&Classes{})
	if err := s.Declare(cfg.Methods); err != nil {
		return nil, err
	}
	if s.knobsFn == nil {
		s.knobsFn = flex.Defaults
	}
	if s.now == nil {
		s.clock = newMonoClock()
		s.now = s.clock.now
	}
	if s.rnd == nil {
		s.rnd = rand.Uint64
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, s)
	if err != nil {
		return nil, fmt.Errorf("shedding: register metrics: %w", err)
	}
	s.metrics = m
	s.errShed = rpcstatus.Overload(ReasonShedRatio, RetryAfterShedRatio, "shed: business over its shed_ratio")
	s.errOver = rpcstatus.Overload(ReasonOverload, RetryAfterOverload, "shed: node overloaded")
	now := s.now().UnixNano()
	s.winEnd.Store(now + s.window)
	s.lastRoll.Store(now)
	s.refreshKnobs(now)
	return s, nil
}

// monoClock is the shedder's default clock. time.Now reads two clocks
// (wall and monotonic), each a vDSO call that costs ~80 ns on a virtual
// machine, and admission reads the time on every call; now reads only the
// monotonic clock and adds the time since the anchor, a time.Now taken at
// construction and again at every window roll (anchor). So its wall time
// is time.Now's but for the wall clock's adjustments within one window,
// and it never goes back within an anchor.
type monoClock struct{ at atomic.Pointer[time.Time] }

func newMonoClock() *monoClock {
	c := &monoClock{}
	c.anchor()
	return c
}

func (c *monoClock) now() time.Time {
	a := c.at.Load()
	return a.Add(time.Since(*a))
}

// anchor takes a new anchor from time.Now.
func (c *monoClock) anchor() {
	t := time.Now()
	c.at.Store(&t)
}

// userHash is the keyed hash of (user, hour). An empty user draws a random
// value, so anonymous requests spread over all user priorities.
func userHash(h UserHash, user string, now time.Time, rnd func() uint64) uint64 {
	if user == "" {
		return rnd()
	}
	return h.Sum(user, now)
}

// compoundKey is the DAGOR level of a request: business priority major,
// user priority minor; smaller is more important.
func compoundKey(bizPrio int, h uint64) int {
	return (bizPrio-1)*UserLevels + int(h>>57)
}

// UserPriority returns the priority (0 = highest .. 127) of user at time
// now under key (empty: DefaultUserKey): NewUserHash(key).Priority.
func UserPriority(key []byte, user string, now time.Time) int {
	return NewUserHash(key).Priority(user, now)
}

// Admit takes one admission decision for a request of business and user
// and accounts it in the current window. It does not take a concurrency
// slot; the interceptors do. reason is ReasonShedRatio or ReasonOverload
// when ok is false, "" otherwise. HTTP front ends call it directly.
func (s *Shedder) Admit(business, user string) (reason string, ok bool) {
	reason, ok, bi, _ := s.admit(business, user, s.now())
	if ok {
		s.metrics.admit(bi)
	} else {
		s.metrics.rejected(bi, reason)
	}
	return reason, ok
}

// admit returns the decision at now (the shedder's clock), the business
// index (priority-1) for metrics and the compound key (-1 when shed by
// ratio).
func (s *Shedder) admit(business, user string, now time.Time) (reason string, ok bool, bi, key int) {
	ns := now.UnixNano()
	s.maybeRoll(ns)
	if ns-s.knobsStamp.Load() >= int64(KnobRefresh) {
		s.refreshKnobs(ns)
	}
	bk, known := s.knobs.Load().biz[business]
	p := bk.prio
	if !known {
		p = s.nBiz
	}
	bi = p - 1
	h := userHash(s.hash, user, now, s.rnd)
	// The fraction r of least user priority is shed (UserHash.InRatio),
	// the same users for the whole hour.
	if inRatio(h, bk.ratio) {
		return ReasonShedRatio, false, bi, -1
	}
	k := compoundKey(p, h)
	s.hist[k].Add(1)
	if s.winCount.Add(1) >= DefaultWindowRequests {
		s.maybeRoll(math.MaxInt64)
	}
	if int32(k) > s.level.Load() {
		return ReasonOverload, false, bi, k
	}
	return "", true, bi, k
}

// UserHash is the user hash this shedder ranks users by.
func (s *Shedder) UserHash() UserHash { return s.hash }

// ApplyKnobs installs k at once (node.OnKnobs may call it), instead of
// waiting up to KnobRefresh for the next read of Deps.Knobs.
func (s *Shedder) ApplyKnobs(k flex.Knobs) {
	s.knobsMu.Lock()
	defer s.knobsMu.Unlock()
	s.storeKnobs(k, s.now().UnixNano())
}

func (s *Shedder) refreshKnobs(ns int64) {
	if !s.knobsMu.TryLock() {
		return
	}
	defer s.knobsMu.Unlock()
	s.storeKnobs(s.knobsFn(), ns)
}

// storeKnobs caches k's shed ratios with the businesses' priorities;
// knobsMu must be held.
func (s *Shedder) storeKnobs(k flex.Knobs, ns int64) {
	biz := make(map[string]bizKnobs, len(s.prio)+len(k.ShedRatio))
	for b, p := range s.prio {
		biz[b] = bizKnobs{prio: p}
	}
	for b, r := range k.ShedRatio {
		bk, ok := biz[b]
		if !ok {
			bk.prio = s.nBiz
		}
		bk.ratio = r
		biz[b] = bk
	}
	s.knobs.Store(&cachedKnobs{biz: biz})
	s.knobsStamp.Store(ns)
}

// maybeRoll ends the current window if it is over at ns (math.MaxInt64:
// the request count ran out) and adjusts the admission level.
func (s *Shedder) maybeRoll(ns int64) {
	if ns < s.winEnd.Load() {
		return
	}
	if !s.rollMu.TryLock() {
		return
	}
	defer s.rollMu.Unlock()
	now := s.now().UnixNano()
	if ns != math.MaxInt64 && now < s.winEnd.Load() {
		return // another caller rolled it
	}
	if ns == math.MaxInt64 && s.winCount.Load() < DefaultWindowRequests {
		return
	}
	if s.clock != nil {
		s.clock.anchor()
	}
	s.winCount.Store(0)
	qsum, qn := s.queueSum.Swap(0), s.queueN.Swap(0)
	var fast uint64 // requests that found a free slot: a 0 s wait each
	for i := range s.biz {
		fast += s.biz[i].fast.Load()
	}
	qn += int64(fast - s.fastSeen)
	s.fastSeen = fast
	mean := 0.0
	if qn > 0 {
		mean = float64(qsum) / float64(qn)
	}
	s.lastQueue.Store(math.Float64bits(mean / 1e6))
	s.lastRoll.Store(now)
	counts := s.counts
	for i := range s.hist {
		counts[i] = s.hist[i].Swap(0)
	}
	cur := int(s.level.Load())
	overloaded := mean > float64(s.threshold)
	next := nextLevel(counts, cur, int(s.maxLevel), overloaded)
	s.level.Store(int32(next))
	if cur < int(s.maxLevel) || next < int(s.maxLevel) {
		s.announceUntil.Store(now + int64(DefaultLevelTTL))
	}
	s.winEnd.Store(now + s.window)
	s.metrics.window(next, overloaded)
}

// nextLevel is DAGOR's level update over the window's histogram of
// requests by compound key: when overloaded, the highest level whose
// cumulative load is at most CutRatio of the admitted load; otherwise the
// lowest level above cur admitting at least RaiseRatio of it (all levels
// when no rejected request asked for more).
func nextLevel(counts []int64, cur, maxLevel int, overloaded bool) int {
	var admitted int64
	for k := 0; k <= cur && k < len(counts); k++ {
		admitted += counts[k]
	}
	if overloaded {
		if admitted == 0 {
			return cur
		}
		target := float64(admitted) * CutRatio
		var cum int64
		next := 0
		for k := 0; k < cur; k++ {
			cum += counts[k]
			if float64(cum) > target {
				break
			}
			next = k
		}
		return next
	}
	if cur >= maxLevel {
		return maxLevel
	}
	target := max(float64(admitted)*RaiseRatio, float64(admitted+1))
	cum := admitted
	for k := cur + 1; k < len(counts); k++ {
		cum += counts[k]
		if float64(cum) >= target {
			return k
		}
	}
	return maxLevel
}

// QueueMs returns the mean queueing time in milliseconds over the last
// completed window (0 when the node has been idle for two windows).
func (s *Shedder) QueueMs() float64 {
	ns := s.now().UnixNano()
	s.maybeRoll(ns)
	if ns-s.lastRoll.Load() > 2*s.window {
		return 0
	}
	return math.Float64frombits(s.lastQueue.Load())
}

// AdmitFraction is the share of the compound-key space the current level
// admits, (Level+1)/(MaxLevel+1): 1 when nothing is shed. Heartbeats
// report it for auto-flex.
func (s *Shedder) AdmitFraction() float64 {
	return float64(s.Level()+1) / float64(s.maxLevel+1)
}

// Level returns the current admission level: requests whose compound key
// (business priority-1)*128 + user priority is at most Level are admitted.
// MaxLevel means everything is admitted.
func (s *Shedder) Level() int {
	s.maybeRoll(s.now().UnixNano())
	return int(s.level.Load())
}

// Waiting returns the number of requests waiting for a concurrency slot.
func (s *Shedder) Waiting() int { return s.slots.waiting() }

// MaxLevel returns the level at which every request is admitted.
func (s *Shedder) MaxLevel() int { return int(s.maxLevel) }

// acquire waits for a concurrency slot for a request of compound key key
// (smaller first) and accounts the wait as queueing time. fast is true
// when a slot was free at once: the caller counts such a request
// (bizCount.fast), which is its admission, its 0 s wait and its place in
// the window's queueing mean at once.
func (s *Shedder) acquire(ctx context.Context, bi, key int) (fast bool, err error) {
	if s.slots.tryAcquire() {
		return true, nil
	}
	start := s.now()
	err = s.slots.acquire(ctx, key, s.cfg.MaxWait)
	waited := s.now().Sub(start)
	s.queueSum.Add(int64(waited))
	s.queueN.Add(1)
	s.metrics.queued(bi, waited)
	return false, err
}
