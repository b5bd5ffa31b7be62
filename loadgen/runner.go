package loadgen

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"willow/client"
	willowv1 "willow/proto/willow/v1"
)

// The run is three parts that meet only through the runner's record:
//   - the workload model (workload.go): arrivals, request bodies, flex
//     actions, all driven by the profile;
//   - observation (observe.go, progress.go): cluster gauges every second
//     and the progress line, read from completed records;
//   - verification (verify.go): every acknowledged upload downloaded back
//     and its SHA-256 checked at the end.
// Run wires them together and owns cancellation: every request in flight
// runs under the caller's context, so cancelling a run cancels them.

// Defaults.
const (
	DefaultMaxOutstanding = 256
	DefaultVerifyTimeout  = 60 * time.Second
	// DefaultProgressEvery is how often a plain (non-terminal) progress
	// line is printed; a terminal is redrawn every second.
	DefaultProgressEvery = 5 * time.Second
	// ProgressWindow is the rolling window of the progress figures and the
	// latency chart: rates and p99 over the completions in the last
	// ProgressWindow, by completion time.
	ProgressWindow = 10 * time.Second
	sampleEvery    = time.Second
	uploadTimeout  = 60 * time.Second
	downloadTimout = 30 * time.Second
)

// Driver makes the requests of a run; *client.Client is one.
type Driver interface {
	Upload(ctx context.Context, r io.ReaderAt, size int64, opts client.UploadOptions) (*client.UploadResult, error)
	Download(ctx context.Context, id, variant string, w io.Writer) (*willowv1.DataChunk, error)
}

var _ Driver = (*client.Client)(nil)

// Target is the cluster a run drives.
type Target struct {
	// Client uploads and downloads; required.
	Client Driver
	// Master is the master's client, for flex actions and observations;
	// required.
	Master willowv1.MasterClient
	// OncallToken authorizes flex actions.
	OncallToken string
	// Conn dials a node (upload fronts for buffer status, the timeline).
	Conn func(addr string) (*grpc.ClientConn, error)
}

// RunConfig configures one run. Zero values mean the default.
type RunConfig struct {
	Profile *Profile
	Target  Target
	// Mode labels the run in reports ("flex-on", "flex-off").
	Mode string
	// FlexOff ignores the profile's flex actions (the --compare baseline).
	FlexOff bool
	// MaxOutstanding bounds requests in flight; arrivals over it count as
	// dropped by the generator. Default DefaultMaxOutstanding.
	MaxOutstanding int
	// VerifyTimeout bounds the end-of-run check that every acknowledged
	// upload is downloadable, and the polls for the variants of uploads
	// acknowledged processing (counted from the check's start); default
	// DefaultVerifyTimeout.
	VerifyTimeout time.Duration
	// Progress receives live progress. On a terminal (TTY) one line is
	// redrawn in place every second; otherwise a plain line is printed
	// every ProgressEvery (default DefaultProgressEvery).
	Progress      io.Writer
	TTY           bool
	ProgressEvery time.Duration
	// Seed seeds the generator's randomness; default 1.
	Seed uint64
}

// runner is the state of one run.
type runner struct {
	cfg     RunConfig
	start   time.Time
	samples []sample
	videos  []sample

	mu      sync.Mutex // guards records, acks, ready, polled, notReady, events, gauges, level
	records []record
	acks    []acked
	// ready holds the variant-ready latencies known (variants.go); polled
	// counts the uploads acknowledged processing, notReady those still
	// without a variant when polling ended.
	ready    []time.Duration
	polled   int
	notReady int
	// pollCtx ends the variant polls once the run is verified; polls
	// tracks them.
	pollCtx context.Context
	polls   sync.WaitGroup
	events  []Event
	gauges  []Second
	level   string

	outstanding atomic.Int64
	upFlight    atomic.Int64 // uploads in flight
	downFlight  atomic.Int64 // downloads in flight
	seq         atomic.Int64
	wg          sync.WaitGroup
	rng         *rand.Rand
	rngMu       sync.Mutex // guards rng
	lastPlain   time.Time  // last plain progress line (observe goroutine only)
}

// Run runs the profile against the target and returns the report.
//
// Cancelling ctx ends the run: arrivals stop, every request in flight is
// cancelled (recorded as canceled, not failed), verification is skipped
// (the report says Cancelled) and Run returns the partial report with
// ctx's error.
func Run(ctx context.Context, cfg RunConfig) (*Report, error) {
	if cfg.Profile == nil || cfg.Target.Client == nil || cfg.Target.Master == nil {
		return nil, errors.New("loadgen: Profile, Target.Client and Target.Master are required")
	}
	if cfg.MaxOutstanding <= 0 {
		cfg.MaxOutstanding = DefaultMaxOutstanding
	}
	if cfg.VerifyTimeout <= 0 {
		cfg.VerifyTimeout = DefaultVerifyTimeout
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Mode == "" {
		cfg.Mode = "flex-on"
		if cfg.FlexOff {
			cfg.Mode = "flex-off"
		}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), level: "normal"}
	if err := r.loadMedia(); err != nil {
		return nil, err
	}
	if st, err := cfg.Target.Master.GetFlex(ctx, &willowv1.GetFlexRequest{}); err == nil {
		r.level = st.GetLevel()
	}
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	r.pollCtx = pollCtx
	r.start = time.Now()
	// Arrivals, actions and observation stop at the profile's end; the
	// requests they started run on under ctx until they answer.
	runCtx, cancel := context.WithTimeout(ctx, cfg.Profile.Total())
	defer cancel()

	var loops sync.WaitGroup
	loops.Add(4)
	go func() { defer loops.Done(); r.arrivals(runCtx, ctx, kindUpload) }()
	go func() { defer loops.Done(); r.arrivals(runCtx, ctx, kindDownload) }()
	go func() { defer loops.Done(); r.actions(runCtx) }()
	go func() { defer loops.Done(); r.observe(runCtx) }()
	loops.Wait()
	r.wg.Wait() // requests in flight finish: answered, timed out or cancelled
	r.progressDone()
	rep := r.report()
	if ctx.Err() != nil {
		rep.Cancelled = true
		return rep, ctx.Err()
	}
	deadline := time.Now().Add(cfg.VerifyTimeout)
	lost, pending := r.verify(ctx)
	rep.Totals.Lost, rep.Totals.Pending = lost, pending
	// The variant polls get as long as the verification did: an upload
	// with no variant then counts as not ready.
	polled := make(chan struct{})
	go func() { r.polls.Wait(); close(polled) }()
	t := time.NewTimer(time.Until(deadline))
	select {
	case <-polled:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	stopPolls()
	<-polled
	r.mu.Lock()
	rep.Variants = r.variantStats()
	r.mu.Unlock()
	return rep, ctx.Err()
}
