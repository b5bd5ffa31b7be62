package timeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Run releases held items and refreshes the backlog gauges until ctx is
// done; it then returns nil. Any number of Servers may Run against one
// Redis: the release rate is capped across all of them.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.refreshLoop(ctx) }()
	go func() { defer wg.Done(); s.releaseLoop(ctx) }()
	wg.Wait()
	return nil
}

// Gauges reports the held backlog for node heartbeats (node.Config.Gauges):
// held_items and held_users as last read from Redis.
func (s *Server) Gauges() map[string]float64 {
	return map[string]float64{
		"held_items": float64(s.heldItems.Load()),
		"held_users": float64(s.heldUsers.Load()),
	}
}

// releaseResult is one step of the release loop.
type releaseResult struct {
	moved    int
	wait     time.Duration // > 0: the bucket needs this long
	paused   bool          // rate 0
	eligible bool          // some user is releasable
}

// ReleaseOnce runs one release step with the current knobs and returns the
// number of items moved. The release loop calls it; tools and tests may.
func (s *Server) ReleaseOnce(ctx context.Context) (int, error) {
	r, err := s.releaseStep(ctx)
	return r.moved, err
}

func (s *Server) releaseStep(ctx context.Context) (releaseResult, error) {
	k := s.node.Knobs()
	ratio := math.Max(0, k.TimelineDelayRatio)
	if ratio >= 1 {
		return releaseResult{}, nil
	}
	rate := math.Max(0, k.TimelineReleasePerS)
	// The bucket holds 1/10 s of tokens; a step waits for 1/20 s worth
	// (or a full batch), so a late, jittered wake-up wastes none.
	burst := math.Max(1, rate/10)
	need := math.Min(math.Max(1, rate/20), float64(s.cfg.ReleaseBatch))
	s.randMu.Lock()
	start := ratio + s.rnd.Float64()*(1-ratio)
	s.randMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	defer cancel()
	res, err := releaseScript.Run(ctx, s.rdb, nil, s.cfg.KeyPrefix,
		fmtFloat(ratio), fmtFloat(start), s.cfg.ReleaseBatch, fmtFloat(rate), fmtFloat(burst),
		fmtFloat(need), s.cfg.MaxInbox).Int64Slice()
	if err != nil {
		return releaseResult{}, fmt.Errorf("timeline: release: %w", err)
	}
	out := releaseResult{moved: int(res[0]), eligible: res[2] == 1}
	switch {
	case res[1] < 0:
		out.paused = true
	case res[1] > 0:
		out.wait = time.Duration(res[1]) * time.Millisecond
	}
	if out.moved > 0 {
		s.m.released.Add(float64(out.moved))
	}
	return out, nil
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (s *Server) releaseLoop(ctx context.Context) {
	for ctx.Err() == nil {
		r, err := s.releaseStep(ctx)
		var d time.Duration
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.Warn("timeline release", "err", err)
			}
			d = time.Second
		case r.moved > 0:
			continue
		case !r.eligible || r.paused:
			d = s.cfg.IdleInterval
		default:
			d = r.wait
		}
		// Jitter: wake up to 20% later, so several services do not poll
		// the bucket in lockstep.
		s.randMu.Lock()
		d += time.Duration(s.rnd.Float64() * 0.2 * float64(d))
		s.randMu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// stats are the backlog figures kept in Redis.
type stats struct {
	heldItems, heldUsers, released, oldestAgeMs int64
}

func (s *Server) readStats(ctx context.Context) (stats, error) {
	var hc, rel *redis.StringCmd
	var hu *redis.IntCmd
	var ha *redis.ZSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hc = p.Get(ctx, s.key("hc"))
		rel = p.Get(ctx, s.key("rel"))
		hu = p.ZCard(ctx, s.key("hu"))
		ha = p.ZRangeWithScores(ctx, s.key("ha"), 0, 0)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return stats{}, fmt.Errorf("timeline: stats: %w", err)
	}
	var st stats
	st.heldItems, _ = hc.Int64()
	st.released, _ = rel.Int64()
	st.heldUsers = hu.Val()
	if z := ha.Val(); len(z) > 0 {
		st.oldestAgeMs = max(0, s.now().UnixMilli()-int64(z[0].Score))
	}
	return st, nil
}

func (s *Server) releaseRate() float64 {
	return math.Float64frombits(s.releasePerS.Load())
}

func (s *Server) refreshLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.RefreshInterval)
	defer t.Stop()
	lastRel, lastAt := int64(-1), time.Time{}
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		st, err := s.readStats(cctx)
		cancel()
		if err == nil {
			at := time.Now()
			if lastRel >= 0 && st.released >= lastRel {
				rate := float64(st.released-lastRel) / at.Sub(lastAt).Seconds()
				s.releasePerS.Store(math.Float64bits(rate))
				s.m.releaseRate.Set(rate)
			}
			lastRel, lastAt = st.released, at
			s.heldItems.Store(st.heldItems)
			s.heldUsers.Store(st.heldUsers)
			s.m.heldItems.Set(float64(st.heldItems))
			s.m.heldUsers.Set(float64(st.heldUsers))
			s.m.oldestAge.Set(float64(st.oldestAgeMs) / 1000)
		} else if ctx.Err() == nil {
			s.log.Warn("timeline stats", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
