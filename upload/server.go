package upload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"willow/buffer"
	"willow/flex"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/store"
)

// Server is the upload front's gRPC service. Create with New, then Run.
type Server struct {
	willowv1.UnimplementedUploadServer

	cfg       Config
	node      *node.Node
	st        store.Store
	router    router
	compress  willowv1.CompressClient
	pools     [3]*buffer.Pool // index 1 and 2
	journal   journal
	now       func() time.Time
	rand      func() float64
	wouldShed func(context.Context) (string, bool)
	log       *slog.Logger
	region    string
	nodeID    string
	upDir     string

	storeLim *rate.Limiter
	placed   node.RateCounter // persist calls, for the store_writes_per_s signal
	commits  commitCounts     // finished commits, for the console's upload trends
	drainLim *rate.Limiter

	locks [256]sync.Mutex // per media key, striped: commit, drain, compress completion

	mu      sync.Mutex // guards uploads, byID, drainRunning, drained
	uploads map[string]*staged
	// reserved holds the declared size of each staged, uncommitted
	// upload; reservedBytes their sum (the staging budget).
	reserved      map[string]int64
	reservedBytes int64
	byID          map[string]map[string]bool // upload ID -> keys
	// drainRunning marks a background drain of pool N in progress.
	drainRunning [3]bool
	drained      [3][]time.Time // recent drain times, for the rate

	kick chan struct{}
	// compactWant[n] asks for a compaction of pool n (set after a
	// drain); compactKick wakes the compaction loop.
	compactWant [3]atomic.Bool
	compactKick chan struct{}
	m           *metrics
	retiring    atomic.Bool // Retire has begun: new uploads are refused
	hold        *holdings   // what callers hold (callerlimits.go)
}

// service on deps.Node's gRPC server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if deps.Node == nil || deps.Store == nil {
		return nil, errors.New("upload: Deps.Node and Deps.Store are required")
	}
	nc := deps.Node.Config()
	s := &Server{
		cfg: cfg, node: deps.Node, st: deps.Store, compress: deps.Compress,
		now: deps.Now, rand: deps.Rand, wouldShed: deps.WouldShed, log: cfg.Logger,
		region: nc.Region, nodeID: nc.ID,
		upDir:   filepath.Join(cfg.StagingDir, "up"),
		uploads: map[string]*staged{}, reserved: map[string]int64{}, byID: map[string]map[string]bool{}, hold: newHoldings(),
		kick: make(chan struct{}, 1), compactKick: make(chan struct{}, 1),
	}
	if deps.Router != nil {
		s.router = deps.Router
	}
	s.pools[1], s.pools[2] = deps.Pool1, deps.Pool2
	if s.now == nil {
		s.now = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	if s.wouldShed == nil {
		s.wouldShed = shedding.WouldShed
	}
	if s.log == nil {
		s.log = deps.Node.Logger()
	}
	if err := os.MkdirAll(s.upDir, 0o755); err != nil {
		return nil, fmt.Errorf("upload: staging: %w", err)
	}
	fj, err := newFileJournal(filepath.Join(cfg.StagingDir, "journal"))
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	s.journal = fj
	if deps.Redis != nil {
		key := cfg.JournalKey
		if key == "" {
			key = "willow:upload:" + s.nodeID + ":compress"
		}
		rj, err := newRedisJournal(deps.Redis, key)
		if err != nil {
			return nil, fmt.Errorf("upload: %w", err)
		}
		s.journal = &fallbackJournal{primary: rj, file: fj,
			onErr: func(err error) { s.log.Warn("upload: redis journal failed; using the staging dir", "err", err) }}
		shared, err := newRedisJournal(deps.Redis, handoverKey(s.region))
		if err != nil {
			return nil, fmt.Errorf("upload: %w", err)
		}
		s.journal = &sharedJournal{own: s.journal, shared: shared}
	}
	k := deps.Node.Knobs()
	s.storeLim = rate.NewLimiter(rate.Limit(k.StoreWriteBudget), burst(k.StoreWriteBudget))
	s.drainLim = rate.NewLimiter(rate.Limit(k.Pool1DrainPerS), 1)
	deps.Node.OnKnobs(func(k flex.Knobs) {
		s.storeLim.SetLimit(rate.Limit(k.StoreWriteBudget))
		s.storeLim.SetBurst(burst(k.StoreWriteBudget))
		s.drainLim.SetLimit(rate.Limit(k.Pool1DrainPerS))
	})
	s.m = newMetrics(deps.Node.Registry())
	// Auto-flex signal: uploads placed per second, the store writes the
	// front needs whether or not the pools take them for now.
	deps.Node.AddLoad(func(l *willowv1.Load) {
		now := time.Now()
		l.StoreWritesPerS = s.placed.Rate(now)
		s.commits.fill(l, now)
		s.poolGauges(l)
	})
	if err := s.scanStaging(); err != nil {
		return nil, fmt.Errorf("upload: staging: %w", err)
	}
	if err := deps.Node.Guard().Declare(Methods()); err != nil {
		return nil, err
	}
	if err := deps.Node.Shedder().Declare(ShedClasses()); err != nil {
		return nil, err
	}
	willowv1.RegisterUploadServer(deps.Node.Server(), s)
	return s, nil
}

func burst(perS float64) int {
	if perS < 1 {
		return 1
	}
	return int(perS)
}

func (s *Server) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.StoreTimeout)
}

// poolGauges adds the pools' live bytes and items to a heartbeat's gauges
// (pool1_bytes, pool1_items, pool2_bytes, pool2_items), for the console's
// trends and `willow nodes`.
func (s *Server) poolGauges(l *willowv1.Load) {
	for i, p := range s.pools {
		if p == nil {
			continue
		}
		if l.Gauges == nil {
			l.Gauges = map[string]float64{}
		}
		st := p.Stats()
		l.Gauges[fmt.Sprintf("pool%d_bytes", i)] = float64(st.Bytes)
		l.Gauges[fmt.Sprintf("pool%d_items", i)] = float64(st.Items)
	}
}
