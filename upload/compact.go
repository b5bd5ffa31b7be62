package upload

import (
	"context"
	"fmt"
	"time"
)

// compactLoop gives the pools' disk space back in the background (DESIGN.md
// invariant 8): a pool is compacted after a drain that left dead bytes and
// whenever its dead bytes reach Config.CompactDeadBytes. buffer.Pool.Compact
// is crash-safe — a kill -9 at any point of it neither loses a live blob
// nor brings a deleted one back (buffer's TestKill9 runs Compact in the
// process it kills) — so the loop needs no state of its own on disk.
// Appends wait while a compaction copies a sparse segment's live records.
func (s *Server) compactLoop(ctx context.Context) {
	for {
		for n := 1; n <= 2; n++ {
			if ctx.Err() != nil {
				return
			}
			s.maybeCompact(ctx, n)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.compactKick:
		case <-time.After(10 * s.cfg.PollInterval):
		}
	}
}

// maybeCompact compacts pool n when it is due and reports whether it ran.
func (s *Server) maybeCompact(ctx context.Context, n int) bool {
	p := s.pools[n]
	if p == nil {
		return false
	}
	st := p.Stats()
	drained := s.compactWant[n].Swap(false)
	if st.DeadBytes <= 0 || (!drained && st.DeadBytes < s.cfg.CompactDeadBytes) {
		return false
	}
	t0 := s.now()
	if err := p.Compact(ctx); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("upload: pool compaction", "pool", n, "err", err)
		}
		return false
	}
	after := p.Stats()
	label := fmt.Sprint("pool", n)
	s.m.compactions.WithLabelValues(label).Inc()
	s.m.reclaimed.WithLabelValues(label).Add(float64(max(st.DiskBytes-after.DiskBytes, 0)))
	s.log.Info("upload: pool compacted", "pool", n, "disk_before", st.DiskBytes, "disk_after", after.DiskBytes,
		"dead_after", after.DeadBytes, "took", s.now().Sub(t0))
	return true
}

// compactSoon asks the compaction loop to look at pool n after a drain.
func (s *Server) compactSoon(n int) {
	s.compactWant[n].Store(true)
	select {
	case s.compactKick <- struct{}{}:
	default:
	}
}
