package master

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"willow/auth"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// Console trends: every TrendStep the master samples, per region, the
// signals the on-call decides on from the live nodes' last heartbeats,
// into a ring of trendPoints samples (15 minutes at the default 5 s step).
// Memory is bounded: trendPoints samples per region, at most
// maxTrendRegions regions; a region without live nodes for a whole span
// is dropped. Each master keeps its own rings (every master reads the
// whole registry), so the console of any master shows them, from when
// that master started.
const (
	// DefaultTrendStep is Config.TrendStep's default.
	DefaultTrendStep = 5 * time.Second
	trendPoints      = 180
	maxTrendRegions  = 64
	// trendHistory bounds the audit entries read for level markers.
	trendHistory = 200
)

// trendPoint is one sample of one region. A nil field is a gap: no live
// node of that role reported it (the chart draws nothing, not a zero).
type trendPoint struct {
	AtMs int64 `json:"at_unix_ms"`
	// UploadRate is the uploads per second the region's live upload
	// fronts finished (committed or failed on their side, any protocol),
	// from their last heartbeats. A front that does not report uploads
	// (an older build) is counted by its gRPC requests over the master's
	// success window instead.
	UploadRate *float64 `json:"upload_rate"`
	// UploadSuccess is the share of those uploads (or requests) that
	// succeeded, 0..1; nil without any.
	UploadSuccess *float64 `json:"upload_success"`
	// UploadP99Ms is the highest p99 request duration (gRPC, and tus/IETF
	// HTTP) any upload front reported over its last heartbeat window; nil
	// without requests.
	UploadP99Ms *float64 `json:"upload_p99_ms"`
	// CompressQueueMs is the highest p99 queueing time (waiting for a
	// worker) any compress node reported.
	CompressQueueMs *float64 `json:"compress_queue_p99_ms"`
	// Pool1Bytes and Pool2Bytes sum the upload fronts' pool sizes.
	Pool1Bytes *float64 `json:"pool1_bytes"`
	Pool2Bytes *float64 `json:"pool2_bytes"`
	// HeldItems sums the timeline nodes' held notifications.
	HeldItems *float64 `json:"held_items"`
	// Level is the flex level the region ran at (its scope's, else the
	// global one).
	Level string `json:"level"`
}

// trendRing is a region's last trendPoints samples.
type trendRing struct {
	pts    [trendPoints]trendPoint
	n      int // samples held, up to trendPoints
	next   int // where the next sample goes
	liveMs int64
}

func (r *trendRing) add(p trendPoint) {
	r.pts[r.next] = p
	r.next = (r.next + 1) % trendPoints
	r.n = min(r.n+1, trendPoints)
}

// points returns the samples oldest first.
func (r *trendRing) points() []trendPoint {
	out := make([]trendPoint, 0, r.n)
	for i := range r.n {
		out = append(out, r.pts[(r.next-r.n+i+trendPoints)%trendPoints])
	}
	return out
}

// trendState is the Server's part for trends.
type trendState struct {
	trendMu sync.Mutex // guards trends
	trends  map[string]*trendRing
}

// runTrends samples the trends every TrendStep until ctx is done.
func (s *Server) runTrends(ctx context.Context) {
	t := time.NewTicker(s.cfg.TrendStep)
	defer t.Stop()
	for {
		if err := s.sampleTrends(ctx); err != nil && ctx.Err() == nil {
			s.log.Debug("trends: sample", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// regionAgg collects one region's figures for one sample.
type regionAgg struct {
	uploads, compress, timelines int
	req, errs                    int64
	done, failed                 float64 // uploads/s finished, failed (node.GaugeUpload*)
	counted                      int     // upload fronts reporting done and failed
	p99, queue                   float64
	pool1, pool2, held           float64
}

// sampleTrends adds one sample per region with live nodes.
func (s *Server) sampleTrends(ctx context.Context) error {
	v, err := s.cached(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	ref := v.at
	if ref.IsZero() {
		ref = now
	}
	from := ref.UnixMilli() - s.cfg.SuccessWindow.Milliseconds()
	aggs := map[string]*regionAgg{}
	for _, e := range v.entries {
		if !e.alive(now, s.cfg.MissedAfter) {
			continue
		}
		region := e.info.GetRegion()
		a := aggs[region]
		if a == nil {
			a = &regionAgg{}
			aggs[region] = a
		}
		l := e.load
		g := l.GetGauges()
		switch e.info.GetRole() {
		case "upload":
			a.uploads++
			if ok, has := g[node.GaugeUploadsPerS]; has {
				a.counted++
				a.done += ok + g[node.GaugeUploadFailuresPerS]
				a.failed += g[node.GaugeUploadFailuresPerS]
			}
			req, errs := window(e.samples, from)
			a.req += req
			a.errs += errs
			a.p99 = max(a.p99, l.GetLatencyP99Ms()) // 0 without requests
			a.pool1 += g["pool1_bytes"]
			a.pool2 += g["pool2_bytes"]
		case "compress":
			a.compress++
			q := l.GetQueueP99Ms()
			if q == 0 {
				q = l.GetQueueMs() // a node that does not report the p99
			}
			a.queue = max(a.queue, q)
		case "timeline":
			a.timelines++
			a.held += g["held_items"]
		}
	}
	st := s.flexSnapshot()
	winS := s.cfg.SuccessWindow.Seconds()
	s.trendMu.Lock()
	defer s.trendMu.Unlock()
	if s.trends == nil {
		s.trends = map[string]*trendRing{}
	}
	for region, a := range aggs {
		r := s.trends[region]
		if r == nil {
			if len(s.trends) >= maxTrendRegions {
				continue
			}
			r = &trendRing{}
			s.trends[region] = r
		}
		r.liveMs = now.UnixMilli()
		p := trendPoint{AtMs: now.UnixMilli(), Level: regionLevel(st, region)}
		if a.uploads > 0 {
			p.Pool1Bytes, p.Pool2Bytes = ptr(a.pool1), ptr(a.pool2)
			if a.counted == a.uploads {
				p.UploadRate = ptr(a.done)
				if a.done > 0 {
					p.UploadSuccess = ptr((a.done - a.failed) / a.done)
				}
			} else {
				p.UploadRate = ptr(float64(a.req) / winS)
				if a.req > 0 {
					p.UploadSuccess = ptr(float64(a.req-a.errs) / float64(a.req))
				}
			}
			if a.p99 > 0 {
				p.UploadP99Ms = ptr(a.p99)
			}
		}
		if a.compress > 0 {
			p.CompressQueueMs = ptr(a.queue)
		}
		if a.timelines > 0 {
			p.HeldItems = ptr(a.held)
		}
		r.add(p)
	}
	// A region silent for a whole span has nothing left to show.
	span := s.trendSpan().Milliseconds()
	for region, r := range s.trends {
		if now.UnixMilli()-r.liveMs > span {
			delete(s.trends, region)
		}
	}
	return nil
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (s *Server) trendSpan() time.Duration { return trendPoints * s.cfg.TrendStep }

// regionLevel is the level region runs at: its scope's, else the global.
func regionLevel(st *willowv1.FlexState, region string) string {
	for _, sc := range st.GetScopes() {
		if sc.GetScope() == "region:"+region && sc.GetLevel() != "" {
			return sc.GetLevel()
		}
	}
	return levelName(st.GetLevel())
}

// trendMarker is an accepted flex change that moved a region's level.
type trendMarker struct {
	AtMs   int64  `json:"at_unix_ms"`
	From   string `json:"from"`
	To     string `json:"to"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// summaryLevel reads the level region ran at from an audit summary
// (flex.Summary: "v3 red k=v | region:a blue k=v (expires …)"); "" when
// the summary says nothing (a denied change, a drill).
func summaryLevel(sum, region string) string {
	parts := strings.Split(sum, " | ")
	f := strings.Fields(parts[0])
	if len(f) < 1 || !strings.HasPrefix(f[0], "v") {
		return ""
	}
	level := "normal" // a state without a level name
	if len(f) >= 2 && !strings.Contains(f[1], "=") && f[1] != "(expires" {
		level = f[1]
	}
	for _, p := range parts[1:] {
		f := strings.Fields(p)
		if len(f) >= 2 && f[0] == "region:"+region && !strings.Contains(f[1], "=") && f[1] != "(expires" {
			level = f[1]
		}
	}
	return level
}

// levelMarkers returns the level changes of region since fromMs, oldest
// first, from the flex history.
func levelMarkers(entries []*willowv1.AuditEntry, region string, fromMs int64) []trendMarker {
	out := []trendMarker{}
	for _, e := range entries {
		if !e.GetAccepted() || e.GetAtUnixMs() < fromMs {
			continue
		}
		a, b := summaryLevel(e.GetFrom(), region), summaryLevel(e.GetTo(), region)
		if a == "" || b == "" || a == b {
			continue
		}
		out = append(out, trendMarker{AtMs: e.GetAtUnixMs(), From: a, To: b, Actor: e.GetActor(), Action: e.GetAction(), Reason: e.GetReason()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AtMs < out[j].AtMs })
	return out
}

type consoleTrendRegion struct {
	Region  string        `json:"region"`
	Points  []trendPoint  `json:"points"`
	Markers []trendMarker `json:"markers"`
}

type consoleTrends struct {
	StepMs     int64                `json:"step_ms"`
	SpanMs     int64                `json:"span_ms"`
	NowMs      int64                `json:"now_unix_ms"`
	RateWindow int64                `json:"rate_window_ms"` // what upload_rate is averaged over
	Regions    []consoleTrendRegion `json:"regions"`
	// HistoryError says the level markers could not be read.
	HistoryError string `json:"history_error,omitempty"`
}

// trendRoutes adds the trends endpoint to the console:
//
//	GET /api/trends   per region, the last 15 minutes of samples and the
//	                  level changes (role read)
func (s *Server) trendRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/trends", s.consoleAuth(auth.RoleRead, s.apiTrends))
}

func (s *Server) apiTrends(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	now := s.now()
	span := s.trendSpan()
	out := consoleTrends{StepMs: s.cfg.TrendStep.Milliseconds(), SpanMs: span.Milliseconds(), NowMs: now.UnixMilli(),
		RateWindow: s.cfg.SuccessWindow.Milliseconds(), Regions: []consoleTrendRegion{}}
	s.trendMu.Lock()
	for region, ring := range s.trends {
		out.Regions = append(out.Regions, consoleTrendRegion{Region: region, Points: ring.points()})
	}
	s.trendMu.Unlock()
	sort.Slice(out.Regions, func(i, j int) bool { return out.Regions[i].Region < out.Regions[j].Region })
	var entries []*willowv1.AuditEntry
	if len(out.Regions) > 0 {
		h, err := s.FlexHistory(ctx, &willowv1.FlexHistoryRequest{Limit: trendHistory})
		if err != nil {
			out.HistoryError = err.Error()
		}
		entries = slices.Clone(h.GetEntries())
	}
	from := now.Add(-span).UnixMilli()
	for i := range out.Regions {
		out.Regions[i].Markers = levelMarkers(entries, out.Regions[i].Region, from)
	}
	writeConsoleJSON(w, http.StatusOK, out)
}
