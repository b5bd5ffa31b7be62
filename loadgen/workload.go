package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/client"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
)

// The workload model: what the profile asks for, when, and how each
// request is made. It writes records; it never reads them back.

// Request kinds.
const (
	kindUpload   = "upload"
	kindDownload = "download"
)

// outcome of one request.
type outcome int

const (
	okOutcome outcome = iota
	rejected
	failed
	dropped
	notReady
	canceled
)

// record is one request: when it arrived, when it completed, and how.
type record struct {
	sec      int           // arrival second since the start
	done     time.Duration // completion time since the start (arrival for drops)
	kind     string        // kindUpload | kindDownload
	business string
	outcome  outcome
	reason   string
	latency  time.Duration
	bytes    int64
	err      string // the status line of a failed or rejected request
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

func (r *runner) loadMedia() error {
	maxBytes := int64(0)
	for _, ph := range r.cfg.Profile.Phases {
		if ph.MaxPhotoBytes > maxBytes || ph.MaxPhotoBytes == 0 {
			maxBytes = ph.MaxPhotoBytes
		}
	}
	var err error
	if r.samples, err = loadSamples(r.cfg.Profile.PhotoDir, maxBytes, false); err != nil {
		return err
	}
	if r.cfg.Profile.VideoDir != "" {
		if r.videos, err = loadSamples(r.cfg.Profile.VideoDir, 0, true); err != nil {
			return err
		}
	}
	return nil
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
	if kind == kindDownload {
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

func (r *runner) flight(kind string) *atomic.Int64 {
	if kind == kindUpload {
		return &r.upFlight
	}
	return &r.downFlight
}

// arrivals launches requests of kind as a Poisson process at the phase's
// rate, never waiting for answers, until arrive ends. Each request runs
// under reqs (the run's context), so cancelling the run cancels it.
func (r *runner) arrivals(arrive, reqs context.Context, kind string) {
	for arrive.Err() == nil {
		elapsed := time.Since(r.start)
		rate := r.rate(kind, elapsed)
		if rate <= 0 {
			sleep(arrive, 50*time.Millisecond)
			continue
		}
		gap := time.Duration(-math.Log(1-r.float()) / rate * float64(time.Second))
		sleep(arrive, gap)
		if arrive.Err() != nil {
			return
		}
		now := time.Since(r.start)
		sec := int(now / time.Second)
		_, ph, _ := r.phaseAt(now)
		if r.outstanding.Load() >= int64(r.cfg.MaxOutstanding) {
			r.add(record{sec: sec, done: now, kind: kind, outcome: dropped, reason: "generator_limit"})
			continue
		}
		r.outstanding.Add(1)
		r.flight(kind).Add(1)
		r.wg.Add(1)
		go func(ph Phase) {
			defer r.wg.Done()
			defer r.outstanding.Add(-1)
			defer r.flight(kind).Add(-1)
			if kind == kindUpload {
				r.upload(reqs, sec, &ph)
			} else {
				r.download(reqs, sec, &ph)
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

// classify maps a request's error to its outcome. run is the run's
// context: a request cut short because the run was cancelled is canceled,
// not a failure of the cluster.
func classify(run context.Context, err error) (outcome, string) {
	if err == nil {
		return okOutcome, ""
	}
	if run.Err() != nil && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled) {
		return canceled, "run_cancelled"
	}
	reason := rpcstatus.Reason(err)
	switch status.Code(err) {
	case codes.ResourceExhausted:
		if reason == "" {
			reason = shedding.ReasonOverload
		}
		return rejected, reason
	case codes.NotFound:
		if reason == "" {
			reason = rpcstatus.ReasonNotFound
		}
		return notReady, reason
	}
	if reason == "" {
		reason = strings.ToLower(status.Code(err).String())
	}
	return failed, reason
}

// errLine is what a report keeps of a failed or rejected request's error.
func errLine(o outcome, err error) string {
	if o != failed && o != rejected {
		return ""
	}
	return rpcstatus.Line(err)
}

func (r *runner) upload(run context.Context, sec int, ph *Phase) {
	business := r.pickBusiness(ph)
	user := fmt.Sprintf("u%d", r.intn(ph.Users))
	var s sample
	if ph.VideoShare > 0 && len(r.videos) > 0 && r.float() < ph.VideoShare {
		s = r.videos[r.intn(len(r.videos))]
	} else {
		s = r.samples[r.intn(len(r.samples))]
	}
	id := fmt.Sprintf("load-%d-%d", r.start.UnixNano(), r.seq.Add(1))
	ctx, cancel := context.WithTimeout(run, uploadTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := r.cfg.Target.Client.Upload(ctx, bytes.NewReader(s.Photo), int64(len(s.Photo)), client.UploadOptions{
		UploadID: id, User: user, Business: business, Filename: s.Name,
	})
	o, reason := classify(run, err)
	rec := record{sec: sec, done: time.Since(r.start), kind: kindUpload, business: business, outcome: o, reason: reason, latency: time.Since(t0), err: errLine(o, err)}
	if err == nil {
		rec.bytes = int64(len(s.Photo))
	}
	r.add(rec)
	if err == nil {
		sum := sha256.Sum256(s.Photo)
		a := acked{id: res.ID, sha: hex.EncodeToString(sum[:]), video: s.Video, user: user, business: business}
		r.mu.Lock()
		r.acks = append(r.acks, a)
		processing := len(res.Variants) == 0
		if processing {
			r.polled++
			r.polls.Add(1)
		} else {
			r.ready = append(r.ready, 0)
		}
		r.mu.Unlock()
		if processing {
			go func() {
				defer r.polls.Done()
				r.awaitVariants(a, time.Now(), res.Location == "pool1")
			}()
		}
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

func (r *runner) download(run context.Context, sec int, ph *Phase) {
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
	ctx, cancel := context.WithTimeout(client.WithRequest(run, business, fmt.Sprintf("u%d", r.intn(ph.Users))), downloadTimout)
	defer cancel()
	t0 := time.Now()
	var cw countWriter
	_, err := r.cfg.Target.Client.Download(ctx, a.id, variant, &cw)
	o, reason := classify(run, err)
	r.add(record{sec: sec, done: time.Since(r.start), kind: kindDownload, business: business, outcome: o, reason: reason, latency: time.Since(t0), bytes: int64(cw), err: errLine(o, err)})
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
