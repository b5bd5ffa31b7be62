package upload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultRetireTimeout bounds Retire when Config.RetireTimeout is zero.
const DefaultRetireTimeout = 9 * time.Minute

// RetireReport is what Retire did.
type RetireReport struct {
	// Pool2Drained and Pool1Drained count the items moved into the store.
	Pool2Drained, Pool1Drained int64
	// Pool2Left and Pool1Left count the items still in the pools at the
	// end (pool 1 with RetireKeepPool1, or when the deadline hit).
	Pool2Left, Pool1Left int
	// JobsDone ran to completion; JobsHandedOver went to the region's
	// shared journal for the other fronts; JobsLeft stayed in this front's
	// own journal (no Redis, or Redis failing).
	JobsDone, JobsHandedOver, JobsLeft int
}

// handoverKey is the Redis key of the region's shared compress journal:
// the jobs a retiring front could not finish, run by every front of the
// region.
func handoverKey(region string) string { return "willow:upload:" + region + ":handover" }

// sharedJournal is a front's own journal plus the region's shared one: it
// writes to its own (a rescheduled shared job stays shared), reads and
// removes from both.
type sharedJournal struct {
	own    journal
	shared journal
}

func (j *sharedJournal) Add(ctx context.Context, jb job) error {
	if jb.src == j.shared {
		return j.shared.Add(ctx, jb)
	}
	return j.own.Add(ctx, jb)
}

func (j *sharedJournal) Due(ctx context.Context, now time.Time, n int) ([]job, error) {
	a, err := j.own.Due(ctx, now, n)
	if len(a) >= n {
		return a, err
	}
	b, serr := j.shared.Due(ctx, now, n-len(a))
	return append(a, b...), errors.Join(err, serr)
}

func (j *sharedJournal) Done(ctx context.Context, key string) error {
	return errors.Join(j.own.Done(ctx, key), j.shared.Done(ctx, key))
}

// Len counts this front's own jobs (the journal depth it reports).
func (j *sharedJournal) Len(ctx context.Context) (int64, error) { return j.own.Len(ctx) }

// retiringErr refuses a new upload on a retiring front.
func (s *Server) retiringErr() error {
	if !s.retiring.Load() {
		return nil
	}
	s.m.uploads.WithLabelValues("retiring").Inc()
	return fail(ReasonRetiring, "upload front %s is retiring: upload elsewhere", s.nodeID)
}

// Retiring reports whether Retire has begun.
func (s *Server) Retiring() bool { return s.retiring.Load() }

// Retire migrates what only this front holds before it goes away (the
// upload pod's SIGTERM). It stops admitting new uploads (UNAVAILABLE
// retiring; uploads already begun may still commit, into the store), drains
// pool 2 into the store, drains pool 1 at the pool1_drain_per_s knob unless
// Config.RetireKeepPool1, then runs each pending compress job once more and
// hands those that fail to the region's shared journal in Redis, where the
// other fronts run them. It returns when all that is done or ctx ends
// (bounded by Config.RetireTimeout), with an error naming what was left.
// Run must still be running (it drains pool 1 and runs due jobs
// meanwhile); cancel Run's context after Retire returns. The front keeps
// serving ReadPool, GetMedia and in-flight sessions throughout.
func (s *Server) Retire(ctx context.Context) (RetireReport, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RetireTimeout)
	defer cancel()
	s.retiring.Store(true)
	s.node.Drain() // health NOT_SERVING: balancers send no new uploads
	s.log.Info("upload: retiring", "timeout", s.cfg.RetireTimeout, "keep_pool1", s.cfg.RetireKeepPool1)
	var rep RetireReport
	var errs []error

	if p := s.pools[2]; p != nil {
		// Passes until a pass finds the pool empty: a commit that chose
		// pool 2 just before the flag may append after a pass listed it.
		for backoff := s.cfg.PollInterval; ctx.Err() == nil; {
			if len(rawKeys(p)) == 0 {
				break
			}
			n, err := s.drainAll(ctx, 2)
			rep.Pool2Drained += n
			if err != nil {
				s.log.Warn("upload: retire: pool 2 drain", "err", err)
				if !sleep(ctx, backoff) {
					break
				}
				backoff = min(2*backoff, 5*time.Second)
			}
		}
		rep.Pool2Left = len(rawKeys(p))
		if rep.Pool2Left > 0 {
			errs = append(errs, fmt.Errorf("%d items left in pool 2", rep.Pool2Left))
		}
	}

	if p := s.pools[1]; p != nil && !s.cfg.RetireKeepPool1 {
		// Run's pool-1 loop drains at the knob's rate; wait for it.
		before := len(rawKeys(p))
		for ctx.Err() == nil && len(rawKeys(p)) > 0 {
			if s.node.Knobs().Pool1DrainPerS <= 0 {
				s.log.Warn("upload: retire: pool 1 drain is paused (pool1_drain_per_s=0); keeping pool 1")
				break
			}
			sleep(ctx, s.cfg.PollInterval)
		}
		rep.Pool1Left = len(rawKeys(p))
		rep.Pool1Drained = int64(max(0, before-rep.Pool1Left))
		if rep.Pool1Left > 0 {
			errs = append(errs, fmt.Errorf("%d items left in pool 1", rep.Pool1Left))
		}
	} else if p != nil {
		rep.Pool1Left = len(rawKeys(p))
	}

	// Pending compress jobs: one more attempt each, due or not; what fails
	// goes to the shared journal. Run this on a context of its own so the
	// hand-over still happens when the drains used up the deadline.
	jctx, jcancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CompressTimeout+5*time.Second)
	defer jcancel()
	jobs, err := s.journal.Due(jctx, time.UnixMilli(math.MaxInt64), 1<<16)
	if err != nil {
		errs = append(errs, fmt.Errorf("journal: %w", err))
	}
	for _, j := range jobs {
		if j.src != nil && j.src == s.sharedJournal() {
			continue // another front's hand-over: leave it to the others
		}
		if ctx.Err() == nil {
			if _, err := s.runJob(ctx, j, nil); err == nil {
				rep.JobsDone++
				continue
			}
		}
		if err := s.handOver(jctx, j); err != nil {
			s.log.Warn("upload: retire: job kept in this front's journal", "key", j.Key, "err", err)
			rep.JobsLeft++
			continue
		}
		rep.JobsHandedOver++
	}
	if rep.JobsLeft > 0 {
		errs = append(errs, fmt.Errorf("%d compress jobs left in this front's journal", rep.JobsLeft))
	}
	s.log.Info("upload: retired", "pool2_drained", rep.Pool2Drained, "pool2_left", rep.Pool2Left,
		"pool1_drained", rep.Pool1Drained, "pool1_left", rep.Pool1Left,
		"jobs_done", rep.JobsDone, "jobs_handed_over", rep.JobsHandedOver, "jobs_left", rep.JobsLeft)
	if len(errs) > 0 {
		return rep, fmt.Errorf("upload: retire: %w", errors.Join(errs...))
	}
	return rep, nil
}

func (s *Server) sharedJournal() journal {
	if sj, ok := s.journal.(*sharedJournal); ok {
		return sj.shared
	}
	return nil
}

// handOver moves j from this front's journal to the shared one.
func (s *Server) handOver(ctx context.Context, j job) error {
	shared := s.sharedJournal()
	if shared == nil {
		return errors.New("no shared journal (no Redis)")
	}
	j.src = nil
	if err := shared.Add(ctx, j); err != nil {
		return err
	}
	return s.journal.(*sharedJournal).own.Done(ctx, j.Key)
}
