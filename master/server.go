package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"willow/auth"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
)

// Defaults for Config.
const (
	DefaultKeyPrefix        = "willow:"
	DefaultMissedAfter      = 3 * time.Second
	DefaultMinRequests      = 20
	DefaultMinSuccessRate   = 0.5
	DefaultSuccessWindow    = 5 * time.Second
	DefaultMaxEjectFraction = 1.0 / 3
	DefaultProtection       = 10 * time.Second
	DefaultMaxProtection    = 5 * time.Minute
	DefaultFlapMemory       = 10 * time.Minute
	DefaultProbeInterval    = time.Second
	DefaultProbeTimeout     = 500 * time.Millisecond
	DefaultProbeSuccesses   = 3
	DefaultProbeFailures    = 3
	DefaultProbeBudget      = 500
	DefaultRouteTTL         = 5 * time.Second
	DefaultRefreshInterval  = 250 * time.Millisecond
	DefaultLeaseTTL         = 3 * time.Second
	DefaultEntryTTL         = 5 * time.Minute
	DefaultMaxDrill         = 24 * time.Hour
)

// Config configures a master. Zero values mean the documented default. The
// yaml tags are the keys of the master: section of cmd/master's config
// file; the fields tagged "-" are set by code.
type Config struct {
	// OncallToken is a legacy shared on-call token, accepted as the
	// operator identity "oncall" (role oncall) next to the named
	// identities of the node's auth config (auth.Operators). Prefer named
	// identities: with a shared token the audit cannot say who acted.
	OncallToken string `yaml:"oncall_token"`
	// Operators are more operator identities, next to the node's (tests
	// and in-process clusters).
	Operators *auth.Operators `yaml:"-"`
	// LevelsFile is a YAML file of level plans; empty uses the shipped plans.
	LevelsFile string `yaml:"levels_file"`
	// AutoFlexPolicy is a YAML auto-flex policy file; empty uses the
	// shipped master/autoflex.yaml. Validated at start.
	AutoFlexPolicy string `yaml:"auto_flex_policy"`
	// KeyPrefix prefixes every Redis key; default DefaultKeyPrefix. Keys
	// are KeyPrefix in braces (a Redis Cluster hash tag) unless it holds
	// one already: "{willow:}node:ID".
	KeyPrefix string `yaml:"key_prefix"`

	// ID names this master in the shared leader lease; default the node's ID.
	ID string `yaml:"id"`
	// MissedAfter is how long without a heartbeat takes a node out of
	// Route; default DefaultMissedAfter.
	MissedAfter time.Duration `yaml:"missed_after"`
	// MinRequests is how many requests the success window needs before the
	// success rate can eject a node; default DefaultMinRequests.
	MinRequests int64 `yaml:"min_requests"`
	// MinSuccessRate: a node whose success rate over the window is at or
	// under it is ejected (a node failing half its requests is out);
	// default DefaultMinSuccessRate.
	MinSuccessRate float64 `yaml:"min_success_rate"`
	// SuccessWindow is the window the reported success rate is summed over;
	// default DefaultSuccessWindow.
	SuccessWindow time.Duration `yaml:"success_window"`
	// MaxEjectFraction bounds the fraction of a region's live nodes of one
	// role ejected at once for bad health (see doc.go for the rounding
	// rule); default DefaultMaxEjectFraction.
	MaxEjectFraction float64 `yaml:"max_eject_fraction"`
	// Protection is the first protection window after an ejection; it
	// doubles for every ejection that follows a recovery within FlapMemory,
	// up to MaxProtection. Defaults DefaultProtection, DefaultMaxProtection,
	// DefaultFlapMemory.
	Protection    time.Duration `yaml:"protection"`
	MaxProtection time.Duration `yaml:"max_protection"`
	FlapMemory    time.Duration `yaml:"flap_memory"`
	// ProbeInterval is how often the leading master health-checks nodes;
	// default DefaultProbeInterval. ProbeTimeout bounds one check; default
	// DefaultProbeTimeout.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	ProbeTimeout  time.Duration `yaml:"probe_timeout"`
	// ProbeSuccesses is the run of successful probes that re-admits a node;
	// default DefaultProbeSuccesses. ProbeFailures is the run of failed
	// probes that ejects a healthy node; default DefaultProbeFailures.
	ProbeSuccesses int `yaml:"probe_successes"`
	ProbeFailures  int `yaml:"probe_failures"`
	// ProbeBudget is how many healthy nodes one probe round checks at
	// most; default DefaultProbeBudget. With more healthy nodes than that
	// they take turns (each is checked every ceil(healthy/budget) rounds),
	// so a large fleet does not double the master's RPC load with probes
	// of nodes whose heartbeats arrive anyway. Ejected and probing nodes
	// are checked every round.
	ProbeBudget int `yaml:"probe_budget"`
	// RouteTTL is how long clients may cache a Route answer; default
	// DefaultRouteTTL.
	RouteTTL time.Duration `yaml:"route_ttl"`
	// RefreshInterval is how often a master reloads the shared registry
	// from Redis into its cache; default DefaultRefreshInterval.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// LeaseTTL is the leader lease: one master at a time probes and ejects;
	// default DefaultLeaseTTL.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// EntryTTL is how long a registry entry outlives its last heartbeat in
	// Redis (a dead node is listed as ejected until then); default
	// DefaultEntryTTL.
	EntryTTL time.Duration `yaml:"entry_ttl"`
	// MaxDrill bounds a drill's duration; default DefaultMaxDrill.
	MaxDrill time.Duration `yaml:"max_drill"`
	// TrendStep is how often the master samples the console's trends
	// (it keeps 180 samples per region: 15 minutes at the default
	// DefaultTrendStep).
	TrendStep time.Duration `yaml:"trend_step"`
}

func (c *Config) applyDefaults() error {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	setDur(&c.MissedAfter, DefaultMissedAfter)
	setDur(&c.SuccessWindow, DefaultSuccessWindow)
	setDur(&c.Protection, DefaultProtection)
	setDur(&c.MaxProtection, DefaultMaxProtection)
	setDur(&c.FlapMemory, DefaultFlapMemory)
	setDur(&c.ProbeInterval, DefaultProbeInterval)
	setDur(&c.ProbeTimeout, DefaultProbeTimeout)
	setDur(&c.RouteTTL, DefaultRouteTTL)
	setDur(&c.RefreshInterval, DefaultRefreshInterval)
	setDur(&c.TrendStep, DefaultTrendStep)
	setDur(&c.LeaseTTL, DefaultLeaseTTL)
	setDur(&c.EntryTTL, DefaultEntryTTL)
	setDur(&c.MaxDrill, DefaultMaxDrill)
	if c.MinRequests <= 0 {
		c.MinRequests = DefaultMinRequests
	}
	if c.MinSuccessRate <= 0 {
		c.MinSuccessRate = DefaultMinSuccessRate
	}
	if c.MaxEjectFraction <= 0 {
		c.MaxEjectFraction = DefaultMaxEjectFraction
	}
	if c.ProbeSuccesses <= 0 {
		c.ProbeSuccesses = DefaultProbeSuccesses
	}
	if c.ProbeFailures <= 0 {
		c.ProbeFailures = DefaultProbeFailures
	}
	if c.ProbeBudget <= 0 {
		c.ProbeBudget = DefaultProbeBudget
	}
	switch {
	case c.MinSuccessRate > 1:
		return fmt.Errorf("master: MinSuccessRate %v over 1", c.MinSuccessRate)
	case c.MaxEjectFraction > 1:
		return fmt.Errorf("master: MaxEjectFraction %v over 1", c.MaxEjectFraction)
	case c.MaxProtection < c.Protection:
		return fmt.Errorf("master: MaxProtection %v under Protection %v", c.MaxProtection, c.Protection)
	case c.EntryTTL < c.MissedAfter:
		return fmt.Errorf("master: EntryTTL %v under MissedAfter %v", c.EntryTTL, c.MissedAfter)
	}
	return nil
}

// Deps are the master's dependencies.
type Deps struct {
	// Node is the master's own node runtime (role "master"); required.
	Node *node.Node
	// Redis holds shared state for HA masters: one server or a Redis
	// Cluster; required. The master opens a second pool with the same
	// options for its control plane (flex document, audit, leader lease;
	// controlClient) and closes it when Run returns.
	Redis Redis
	// Now; default time.Now.
	Now func() time.Time
	// Logger; default the node's.
	Logger *slog.Logger
	// Prober health-checks a node's gRPC address; default a gRPC health
	// Check over a cached HTTP/2 connection (no grpc.ClientConn: h2Prober),
	// with the Node's ClientTLS.
	Prober Prober
}

// Server implements willowv1.MasterServer.
type Server struct {
	willowv1.UnimplementedMasterServer
	cfg    Config
	node   *node.Node
	rdb    Redis
	ctl    Redis  // the control plane's own pool (flex document, audit, lease): controlClient
	ctlEnd func() // closes ctl and hbw
	hbw    Redis  // the heartbeat batches' own pool: heartbeatClient
	now    func() time.Time
	log    *slog.Logger
	prober Prober
	met    *metrics
	// started is when New ran (the master's own "since" in ListNodes).
	started time.Time
	// keyTag prefixes every key (the key prefix in one hash slot): made
	// once, as every heartbeat names two keys.
	keyTag string

	mu   sync.Mutex // guards view and leader, and writes of drills
	view *view      // last registry snapshot loaded from Redis
	// drills is replaced whole (under mu) and read without a lock:
	// every heartbeat and Watch event reads it (drillList).
	drills  atomic.Pointer[[]*willowv1.Drill]
	hb      *hbShards  // per node: heartbeats received by this master (own locks)
	hbb     hbBatcher  // heartbeat writes to Redis, by group commit
	routes  routeState // Route's index of the snapshot (route_index.go)
	reg     regState   // this master's copy of the registry (registry_sync.go)
	leader  bool
	probeAt int          // where the next probe round's turn of healthy nodes starts (runLeader only)
	redisUp time.Time    // since when Redis has answered; zero while it does not
	hbLogMs atomic.Int64 // when heartbeatNotWritten last logged, unix ms

	ops *auth.Operators // operator identities (oncall.go); immutable

	flexState  // flex.go
	autoState  // autoflex_run.go
	trendState // console_trends.go
}

// New builds a master and registers its gRPC service on deps.Node.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Node == nil || deps.Redis == nil {
		return nil, errors.New("master: Node and Redis are required")
	}
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		cfg.ID = deps.Node.Config().ID
	}
	s := &Server{cfg: cfg, node: deps.Node, rdb: deps.Redis, now: deps.Now, log: deps.Logger,
		prober: deps.Prober, view: &view{}, hb: newHBShards(), keyTag: redisconn.OneSlot(cfg.KeyPrefix)}
	if s.now == nil {
		s.now = time.Now
	}
	s.routes.kick = make(chan struct{}, 1)
	s.started = s.now()
	if s.log == nil {
		s.log = deps.Node.Logger()
	}
	if s.prober == nil {
		s.prober = newH2Prober(deps.Node.Config().ClientTLS)
	}
	s.met = newMetrics(deps.Node.Registry())
	ops, err := operators(deps.Node.Guard().Operators(), cfg.Operators, cfg.OncallToken)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	s.ops = ops
	ctl, ctlEnd := controlClient(deps.Redis)
	hbw, hbwEnd := heartbeatClient(deps.Redis)
	s.ctl, s.hbw, s.ctlEnd = ctl, hbw, func() { ctlEnd(); hbwEnd() }
	if err := s.initFlex(newRedisFlexStore(s.ctl, cfg.KeyPrefix), deps.Node.Registry()); err != nil {
		s.ctlEnd()
		return nil, err
	}
	if err := s.initAuto(); err != nil {
		s.ctlEnd()
		return nil, err
	}
	if err := deps.Node.Guard().Declare(Methods()); err != nil {
		s.ctlEnd()
		return nil, err
	}
	willowv1.RegisterMasterServer(deps.Node.Server(), s)
	return s, nil
}

// Run runs the master's background work (ejection, probes, flex expiry,
// sync with other masters) until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	go s.runFlex(ctx)
	go s.runAuto(ctx)
	go s.runTrends(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.runRefresh(ctx) }()
	go func() { defer wg.Done(); s.runRoutes(ctx) }()
	go func() { defer wg.Done(); s.runLeader(ctx) }()
	<-ctx.Done()
	wg.Wait()
	if c, ok := s.prober.(interface{ Close() }); ok {
		c.Close()
	}
	s.ctlEnd()
	return nil
}

// key returns the Redis key for name. Every master key shares one hash
// tag, so the registry's transactions and the flex script keep to one
// Redis Cluster slot: "{willow:}node:ID" with the default prefix.
func (s *Server) key(name string) string { return s.keyTag + name }
