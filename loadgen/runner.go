package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/client"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// Defaults.
const (
	DefaultMaxOutstanding = 256
	DefaultVerifyTimeout  = 60 * time.Second
	sampleEvery           = time.Second
)

// Target is the cluster a run drives.
type Target struct {
	// Client uploads and downloads; required.
	Client *client.Client
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
	// upload is downloadable; default DefaultVerifyTimeout.
	VerifyTimeout time.Duration
	// Progress receives live progress; TTY selects the redrawn bar.
	Progress io.Writer
	TTY      bool
	// Seed seeds the generator's randomness; default 1.
	Seed uint64
}

// outcome of one request.
type outcome int

const (
	okOutcome outcome = iota
	rejected
	failed
	dropped
	notReady
)

type record struct {
	sec      int
	kind     string // upload | download
	business string
	outcome  outcome
	reason   string
	latency  time.Duration
	bytes    int64
}

type acked struct {
	id, sha        string
	video          bool
	user, business string // the uploader: the verifier downloads as them
}

type sample struct {
	Photo []byte
	Name  string
	Video bool
}

// runner is the state of one run.
type runner struct {
	cfg     RunConfig
	start   time.Time
	samples []sample
	videos  []sample

	mu      sync.Mutex // guards records, acks, events, gauges, level
	records []record
	acks    []acked
	events  []Event
	gauges  []Second
	level   string

	outstanding atomic.Int64
	seq         atomic.Int64
	wg          sync.WaitGroup
	rng         *rand.Rand
	rngMu       sync.Mutex // guards rng
}

// Run runs the profile against the target and returns the report.
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
	var err error
	maxBytes := int64(0)
	for _, ph := range cfg.Profile.Phases {
		if ph.MaxPhotoBytes > maxBytes || ph.MaxPhotoBytes == 0 {
			maxBytes = ph.MaxPhotoBytes
		}
	}
	if r.samples, err = loadSamples(cfg.Profile.PhotoDir, maxBytes, false); err != nil {
		return nil, err
	}
	if cfg.Profile.VideoDir != "" {
		if r.videos, err = loadSamples(cfg.Profile.VideoDir, 0, true); err != nil {
			return nil, err
		}
	}
	if st, err := cfg.Target.Master.GetFlex(ctx, &willowv1.GetFlexRequest{}); err == nil {
		r.level = st.GetLevel()
	}
	r.start = time.Now()
	total := cfg.Profile.Total()
	runCtx, cancel := context.WithTimeout(ctx, total)
	defer cancel()

	var loops sync.WaitGroup
	loops.Add(4)
	go func() { defer loops.Done(); r.arrivals(runCtx, "upload") }()
	go func() { defer loops.Done(); r.arrivals(runCtx, "download") }()
	go func() { defer loops.Done(); r.actions(runCtx) }()
	go func() { defer loops.Done(); r.observe(runCtx) }()
	loops.Wait()
	r.wg.Wait() // requests in flight finish (each has its own deadline)
	r.progressDone()
	rep := r.report()
	lost, pending := r.verify(ctx)
	rep.Totals.Lost, rep.Totals.Pending = lost, pending
	return rep, ctx.Err()
}

func loadSamples(dir string, maxBytes int64, video bool) ([]sample, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loadgen: media dir: %w", err)
	}
	var out []sample
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !video && ext != ".jpg" && ext != ".jpeg" && ext != ".png" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if maxBytes > 0 && int64(len(b)) > maxBytes {
			continue
		}
		out = append(out, sample{Photo: b, Name: e.Name(), Video: video})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loadgen: no usable media in %s", dir)
	}
	return out, nil
}

// phaseAt returns the phase running at elapsed and how far into it.
func (r *runner) phaseAt(elapsed time.Duration) (int, *Phase, float64) {
	var t time.Duration
	phs := r.cfg.Profile.Phases
	for i := range phs {
		d := phs[i].Duration.D()
		if elapsed < t+d {
			return i, &phs[i], float64(elapsed-t) / float64(d)
		}
		t += d
	}
	return len(phs) - 1, &phs[len(phs)-1], 1
}

func (r *runner) rate(kind string, elapsed time.Duration) float64 {
	_, ph, frac := r.phaseAt(elapsed)
	if kind == "download" {
		return ph.DownloadRate
	}
	if ph.UploadRateEnd > 0 {
		return ph.UploadRate + (ph.UploadRateEnd-ph.UploadRate)*frac
	}
	return ph.UploadRate
}

func (r *runner) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *runner) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

// arrivals launches requests of kind as a Poisson process at the phase's
// rate, never waiting for answers.
func (r *runner) arrivals(ctx context.Context, kind string) {
	for ctx.Err() == nil {
		elapsed := time.Since(r.start)
		rate := r.rate(kind, elapsed)
		if rate <= 0 {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		gap := time.Duration(-math.Log(1-r.float()) / rate * float64(time.Second))
		sleep(ctx, gap)
		if ctx.Err() != nil {
			return
		}
		sec := int(time.Since(r.start) / time.Second)
		_, ph, _ := r.phaseAt(time.Since(r.start))
		if r.outstanding.Load() >= int64(r.cfg.MaxOutstanding) {
			r.add(record{sec: sec, kind: kind, outcome: dropped, reason: "generator_limit"})
			continue
		}
		r.outstanding.Add(1)
		r.wg.Add(1)
		go func(ph Phase) {
			defer r.wg.Done()
			defer r.outstanding.Add(-1)
			if kind == "upload" {
				r.upload(sec, &ph)
			} else {
				r.download(sec, &ph)
			}
		}(*ph)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (r *runner) add(rec record) {
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
}

func (r *runner) pickBusiness(ph *Phase) string {
	names := make([]string, 0, len(ph.Businesses))
	sum := 0.0
	for b, w := range ph.Businesses {
		names = append(names, b)
		sum += w
	}
	sort.Strings(names)
	x := r.float() * sum
	for _, b := range names {
		x -= ph.Businesses[b]
		if x < 0 {
			return b
		}
	}
	return names[len(names)-1]
}

func classify(err error) (outcome, string) {
	if err == nil {
		return okOutcome, ""
	}
	reason := rpcstatus.Reason(err)
	switch status.Code(err) {
	case codes.ResourceExhausted:
		if reason == "" {
			reason = "overload"
		}
		return rejected, reason
	case codes.NotFound:
		if reason == "" {
			reason = "not_found"
		}
		return notReady, reason
	}
	if reason == "" {
		reason = strings.ToLower(status.Code(err).String())
	}
	return failed, reason
}

func (r *runner) upload(sec int, ph *Phase) {
	business := r.pickBusiness(ph)
	user := fmt.Sprintf("u%d", r.intn(ph.Users))
	var s sample
	if ph.VideoShare > 0 && len(r.videos) > 0 && r.float() < ph.VideoShare {
		s = r.videos[r.intn(len(r.videos))]
	} else {
		s = r.samples[r.intn(len(r.samples))]
	}
	id := fmt.Sprintf("load-%d-%d", r.start.UnixNano(), r.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := r.cfg.Target.Client.Upload(ctx, bytes.NewReader(s.Photo), int64(len(s.Photo)), client.UploadOptions{
		UploadID: id, User: user, Business: business, Filename: s.Name,
	})
	o, reason := classify(err)
	rec := record{sec: sec, kind: "upload", business: business, outcome: o, reason: reason, latency: time.Since(t0)}
	if err == nil {
		rec.bytes = int64(len(s.Photo))
	}
	r.add(rec)
	if err == nil {
		sum := sha256.Sum256(s.Photo)
		r.mu.Lock()
		r.acks = append(r.acks, acked{id: res.ID, sha: hex.EncodeToString(sum[:]), video: s.Video, user: user, business: business})
		r.mu.Unlock()
	}
}

// zipfRank draws a rank in [0, n) with P(k) proportional to 1/(k+1)^alpha,
// by inverting the continuous approximation of the CDF (alpha may be < 1).
func zipfRank(u float64, n int, alpha float64) int {
	if n <= 1 {
		return 0
	}
	var k float64
	if math.Abs(alpha-1) < 1e-9 {
		k = math.Exp(u*math.Log(float64(n)+1)) - 1
	} else {
		hn := (math.Pow(float64(n)+1, 1-alpha) - 1) / (1 - alpha)
		k = math.Pow(u*hn*(1-alpha)+1, 1/(1-alpha)) - 1
	}
	i := int(k)
	if i >= n {
		i = n - 1
	}
	if i < 0 {
		i = 0
	}
	return i
}

func (r *runner) download(sec int, ph *Phase) {
	r.mu.Lock()
	n := len(r.acks)
	var a acked
	if n > 0 {
		// The newest posts are the most popular.
		a = r.acks[n-1-zipfRank(r.float(), n, ph.ZipfAlpha)]
	}
	r.mu.Unlock()
	if n == 0 {
		return // nothing posted yet: no arrival to count
	}
	variant := []string{"thumb", "medium"}[r.intn(2)]
	if a.video {
		variant = []string{"poster", "video"}[r.intn(2)]
	}
	business := r.pickBusiness(ph)
	ctx, cancel := context.WithTimeout(client.WithRequest(context.Background(), business, fmt.Sprintf("u%d", r.intn(ph.Users))), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	var cw countWriter
	_, err := r.cfg.Target.Client.Download(ctx, a.id, variant, &cw)
	o, reason := classify(err)
	r.add(record{sec: sec, kind: "download", business: business, outcome: o, reason: reason, latency: time.Since(t0), bytes: int64(cw)})
}

// actions applies the profile's flex actions at their times.
func (r *runner) actions(ctx context.Context) {
	if r.cfg.FlexOff {
		return
	}
	acts := append([]Action(nil), r.cfg.Profile.Actions...)
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].At < acts[j].At })
	for _, a := range acts {
		sleep(ctx, time.Until(r.start.Add(a.At.D())))
		if ctx.Err() != nil {
			return
		}
		reason := a.Reason
		if reason == "" {
			reason = "load profile " + r.cfg.Profile.Name
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if d := a.Drill; d != nil {
			_, err := r.cfg.Target.Master.SetDrill(cctx, &willowv1.SetDrillRequest{
				Token: r.cfg.Target.OncallToken, ForMs: d.For.D().Milliseconds(),
				Drill: &willowv1.Drill{NodeAddr: d.Node, Kind: d.Kind, LatencyMs: d.LatencyMs, ErrorRatio: d.ErrorRatio, Actor: "loadgen", Reason: reason},
			})
			cancel()
			ev := Event{At: time.Since(r.start).Seconds(), Kind: "drill", Level: "drill " + d.Kind + " " + d.Node}
			if err != nil {
				ev.Error = rpcstatus.Line(err)
			}
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
			continue
		}
		resp, err := r.cfg.Target.Master.SetFlex(cctx, &willowv1.SetFlexRequest{
			Token: r.cfg.Target.OncallToken, Level: a.Level, Knobs: a.Knobs,
			Actor: "loadgen", Reason: reason,
		})
		cancel()
		ev := Event{At: time.Since(r.start).Seconds(), Kind: "flex", Level: a.Level, Knobs: a.Knobs}
		if err != nil {
			ev.Error = rpcstatus.Line(err)
		} else {
			ev.Version = resp.GetFlex().GetVersion()
			r.mu.Lock()
			r.level = resp.GetFlex().GetLevel()
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}
}

// observe samples cluster gauges every second and prints progress.
func (r *runner) observe(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g := r.sampleCluster(ctx)
		r.mu.Lock()
		r.gauges = append(r.gauges, g)
		r.mu.Unlock()
		r.progress(g)
	}
}

func (r *runner) sampleCluster(ctx context.Context) Second {
	cctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	g := Second{T: int(time.Since(r.start) / time.Second), CPU: map[string]float64{}, InFlight: map[string]float64{}, Nodes: map[string]int{}}
	r.mu.Lock()
	g.Level = r.level
	r.mu.Unlock()
	if st, err := r.cfg.Target.Master.GetFlex(cctx, &willowv1.GetFlexRequest{}); err == nil {
		g.Level = st.GetLevel()
		g.FlexVersion = st.GetVersion()
	}
	nodes, err := r.cfg.Target.Master.ListNodes(cctx, &willowv1.ListNodesRequest{})
	if err != nil {
		return g
	}
	for _, ns := range nodes.GetNodes() {
		role := ns.GetNode().GetRole()
		g.CPU[role] += ns.GetLoad().GetCpu()
		g.InFlight[role] += float64(ns.GetLoad().GetInFlight())
		if ns.GetState() == "healthy" {
			g.Nodes[role]++
		}
		if rss := ns.GetLoad().GetGauges()["mem_rss_bytes"]; rss > g.MemRSSBytes {
			g.MemRSSBytes = rss
		}
		if r.cfg.Target.Conn == nil {
			continue
		}
		switch role {
		case "upload":
			conn, err := r.cfg.Target.Conn(ns.GetNode().GetAddr())
			if err != nil {
				continue
			}
			bs, err := willowv1.NewUploadClient(conn).BufferStatus(cctx, &willowv1.BufferStatusRequest{})
			if err != nil {
				continue
			}
			for _, p := range bs.GetPools() {
				if p.GetPool() == 1 {
					g.Pool1Items += p.GetItems()
					g.Pool1Bytes += p.GetBytes()
				} else {
					g.Pool2Items += p.GetItems()
					g.Pool2Bytes += p.GetBytes()
				}
			}
		case "timeline":
			conn, err := r.cfg.Target.Conn(ns.GetNode().GetAddr())
			if err != nil {
				continue
			}
			if ts, err := willowv1.NewTimelineClient(conn).Stats(cctx, &willowv1.TimelineStatsRequest{}); err == nil {
				g.HeldItems = ts.GetHeldItems()
			}
		}
	}
	return g
}

// verify checks that every acknowledged upload is downloadable with the
// same SHA-256. Items still held in buffer pool 1 (NOT_FOUND processing)
// when the time is up are pending, not lost.
func (r *runner) verify(ctx context.Context) (lost, pending int) {
	r.mu.Lock()
	acks := append([]acked(nil), r.acks...)
	r.mu.Unlock()
	deadline := time.Now().Add(r.cfg.VerifyTimeout)
	work := make(chan acked)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				switch r.check(ctx, a, deadline) {
				case "lost":
					mu.Lock()
					lost++
					mu.Unlock()
				case "pending":
					mu.Lock()
					pending++
					mu.Unlock()
				}
			}
		}()
	}
	for _, a := range acks {
		work <- a
	}
	close(work)
	wg.Wait()
	return lost, pending
}

func (r *runner) check(ctx context.Context, a acked, deadline time.Time) string {
	for {
		h := sha256.New()
		cctx, cancel := context.WithTimeout(client.WithRequest(ctx, a.business, a.user), 30*time.Second)
		_, err := r.cfg.Target.Client.Download(cctx, a.id, "raw", h)
		cancel()
		if err == nil {
			if hex.EncodeToString(h.Sum(nil)) == a.sha {
				return "ok"
			}
			return "lost" // wrong bytes count as lost
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if rpcstatus.Reason(err) == "processing" {
				return "pending"
			}
			return "lost"
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
