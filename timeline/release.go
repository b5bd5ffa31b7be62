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
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	defer cancel()
	res, err := takeScript.Run(ctx, s.rdb, []string{s.rk.heldUnits(), s.rk.bucket()},
		fmtFloat(ratio), fmtFloat(start), s.cfg.ReleaseBatch, fmtFloat(rate), fmtFloat(burst),
		fmtFloat(need)).Slice()
	if err != nil {
		return releaseResult{}, fmt.Errorf("timeline: release: %w", err)
	}
	if len(res) < 3 {
		return releaseResult{}, fmt.Errorf("timeline: release: %d values from the take script", len(res))
	}
	budget, _ := res[0].(int64)
	wait, _ := res[1].(int64)
	eligible, _ := res[2].(int64)
	out := releaseResult{eligible: eligible == 1}
	switch {
	case wait < 0:
		out.paused = true
	case wait > 0:
		out.wait = time.Duration(wait) * time.Millisecond
	}
	users := make([]string, 0, len(res)-3)
	for _, v := range res[3:] {
		if u, ok := v.(string); ok {
			users = append(users, u)
		}
	}
	if budget <= 0 {
		return out, nil
	}
	// The tokens are taken: finish the step even when the service is
	// stopping (parent done), within RedisTimeout. A step cut between
	// its move and its bookkeeping leaves the held count above the
	// held sets for good.
	mctx, mcancel := context.WithTimeout(context.WithoutCancel(parent), s.cfg.RedisTimeout)
	defer mcancel()
	moved, err := s.move(mctx, users, int(budget))
	if err != nil {
		return out, fmt.Errorf("timeline: release: %w", err)
	}
	out.moved = moved
	if moved > 0 {
		s.m.released.Add(float64(moved))
	}
	return out, nil
}

// move releases up to budget held items of users (the budget split
// evenly among them): one moveScript per slot's users, pipelined; then it
// updates the shared index and counters and gives back the tokens not
// used.
func (s *Server) move(ctx context.Context, users []string, budget int) (int, error) {
	var calls []scriptCall
	var who [][]int
	if len(users) > 0 {
		quota := func(i int) int { // budget / n, the remainder to the first
			q := budget / len(users)
			if i < budget%len(users) {
				q++
			}
			return q
		}
		floor := s.seqFloor()
		all := make([]int, len(users))
		for i := range all {
			all[i] = i
		}
		for _, idx := range s.bySlot(all, func(i int) string { return users[i] }) {
			slot := s.slotOf(users[idx[0]])
			seq, held := s.seq(slot), s.slotHeld(slot)
			for len(idx) > 0 {
				n := min(len(idx), s.cfg.FanoutBatch)
				chunk := idx[:n]
				idx = idx[n:]
				c := scriptCall{keys: make([]string, 0, 2+2*n), args: make([]any, 0, 3+n)}
				c.keys = append(c.keys, seq)
				counted := "0"
				if held != "" {
					c.keys = append(c.keys, held)
					counted = "1"
				}
				c.args = append(c.args, s.cfg.MaxInbox, floor, counted)
				for _, i := range chunk {
					c.keys = append(c.keys, s.rk.inbox(users[i]), s.rk.held(users[i]))
					c.args = append(c.args, quota(i))
				}
				calls = append(calls, c)
				who = append(who, chunk)
			}
		}
	}
	cmds, err := s.runScripts(ctx, moveScript, calls, nil)
	if err != nil {
		return 0, err
	}
	moved := 0
	var emptied []any    // users whose held set is now empty
	var heads []string   // the oldest held ref of the others
	var waiting []string // ... and those users
	for c, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil || len(vals) != 3*len(who[c]) {
			return 0, fmt.Errorf("move script: %d values for %d users: %v", len(vals), len(who[c]), err)
		}
		for j, i := range who[c] {
			m, _ := vals[3*j].(int64)
			left, _ := vals[3*j+1].(int64)
			head, _ := vals[3*j+2].(string)
			moved += int(m)
			if left == 0 {
				emptied = append(emptied, users[i])
			} else {
				heads = append(heads, head)
				waiting = append(waiting, users[i])
			}
		}
	}
	// The posted-at of each remaining head, for the oldest-held gauge.
	ats := make([]*redis.StringCmd, len(heads))
	if len(heads) > 0 {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, h := range heads {
				ats[i] = p.HGet(ctx, s.rk.post(h), "t")
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return moved, fmt.Errorf("held heads: %w", err)
		}
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if left := budget - moved; left > 0 {
			p.HIncrByFloat(ctx, s.rk.bucket(), "tokens", float64(left))
		}
		if moved > 0 {
			p.DecrBy(ctx, s.rk.heldCount(), int64(moved))
			p.IncrBy(ctx, s.rk.released(), int64(moved))
		}
		if len(emptied) > 0 {
			p.ZRem(ctx, s.rk.heldUnits(), emptied...)
			p.ZRem(ctx, s.rk.heldAges(), emptied...)
		}
		if len(waiting) > 0 {
			zs := make([]redis.Z, len(waiting))
			for i, u := range waiting {
				at, err := ats[i].Int64()
				if err != nil {
					at = s.now().UnixMilli()
				}
				zs[i] = redis.Z{Score: float64(at), Member: u}
			}
			// XX: a concurrent step may have emptied and dropped the user.
			p.ZAddXX(ctx, s.rk.heldAges(), zs...)
		}
		return nil
	}); err != nil {
		return moved, fmt.Errorf("held index: %w", err)
	}
	if len(emptied) > 0 {
		if err := s.reindex(ctx, emptied); err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// reindex looks again at the held sets of users just dropped from the
// held index, and puts back those a concurrent publish held a post for
// in between (deliver writes the held set before the index).
func (s *Server) reindex(ctx context.Context, users []any) error {
	exists := make([]*redis.IntCmd, len(users))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			exists[i] = p.Exists(ctx, s.rk.held(u.(string)))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("held recheck: %w", err)
	}
	var units, ages []redis.Z
	at, hash := s.now(), s.node.UserHash()
	now := float64(at.UnixMilli())
	for i, u := range users {
		if exists[i].Val() > 0 {
			units = append(units, redis.Z{Score: hash.Unit(u.(string), at), Member: u})
			ages = append(ages, redis.Z{Score: now, Member: u})
		}
	}
	if len(units) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, s.rk.heldUnits(), units...)
		p.ZAddLT(ctx, s.rk.heldAges(), ages...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("held reindex: %w", err)
	}
	return nil
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
		hc = p.Get(ctx, s.rk.heldCount())
		rel = p.Get(ctx, s.rk.released())
		hu = p.ZCard(ctx, s.rk.heldUnits())
		ha = p.ZRangeWithScores(ctx, s.rk.heldAges(), 0, 0)
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
