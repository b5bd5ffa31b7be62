package upload

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// permanent reports whether a compress error means the bytes can never be
// made into variants: compress answered INVALID_ARGUMENT (undecodable,
// unsupported, over a limit). Everything else — overload, an outage, a
// deadline, an internal error — is transient and retried with backoff.
func permanent(err error) bool {
	return status.Code(err) == codes.InvalidArgument
}

// Defaults of the retry caps.
const (
	// DefaultMaxInternalAttempts: compress answered INTERNAL this many
	// times for one job (it ran the task and broke on it) — a bug that
	// the same bytes will hit again, not an outage.
	DefaultMaxInternalAttempts = 5
	// DefaultMaxRetryAge: any transient error (an outage, overload) is
	// retried for this long, then the job is failed. Long enough to ride
	// out a holiday-sized compress outage.
	DefaultMaxRetryAge = 72 * time.Hour
)

// internalErr reports whether err is a compress answer of INTERNAL,
// UNKNOWN or DATA_LOSS (not a transport failure, a deadline or our own
// store error, which carry no gRPC status or another code).
func internalErr(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return true
	}
	return false
}

// exhausted returns the dead-letter cause when j, failing now with the
// transient err, has reached a retry cap; nil while it may be retried.
func (s *Server) exhausted(j job, err error) error {
	if err == nil {
		return nil
	}
	if internalErr(err) && j.Internal+1 >= s.cfg.MaxInternalAttempts {
		return fail(ReasonRetriesExhausted,
			"compress failed internally %d times (last: %s); retried only by an operator", j.Internal+1, rpcstatus.Line(err))
	}
	if j.FirstAt > 0 && s.now().Sub(time.UnixMilli(j.FirstAt)) >= s.cfg.MaxRetryAge {
		return fail(ReasonRetriesExhausted,
			"still failing after %v and %d attempts (last: %s); retried only by an operator",
			s.cfg.MaxRetryAge, j.Attempts+1, rpcstatus.Line(err))
	}
	return nil
}

// compressFailed answers a failed compress call for job j: a permanent
// refusal (permanent) or a job past its retry caps (exhausted) fails the
// media item (fail); any other error is returned, for a retry later.
func (s *Server) compressFailed(ctx context.Context, j job, rec Record, err error) (*Record, error) {
	if permanent(err) {
		return s.fail(ctx, j, rec, err)
	}
	if cause := s.exhausted(j, err); cause != nil {
		return s.fail(ctx, j, rec, cause)
	}
	return nil, err
}

// fail moves the media item of j to the dead-letter state: its store
// record says failed with the reason, and the job leaves the journal, so
// nothing retries it until an operator's RetryMedia. Callers hold the
// key's lock. An error (the store is down) leaves the job to be retried.
func (s *Server) fail(ctx context.Context, j job, rec Record, cause error) (*Record, error) {
	reason := rpcstatus.Reason(cause)
	if reason == "" {
		reason = ReasonCompressRefused
	}
	msg := cause.Error()
	if st, ok := status.FromError(cause); ok {
		msg = st.Message()
	}
	rec.State, rec.Reason, rec.Error, rec.FailedAt = StateFailed, reason, msg, s.now().UTC()
	rec.Variants = []VariantEntry{}
	rec.Attempts = j.Attempts + 1
	sctx, cancel := s.storeCtx(ctx)
	err := writeRecord(sctx, s.st, rec)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("record failure: %w", err)
	}
	if err := s.journal.Done(ctx, j.Key); err != nil {
		return nil, err
	}
	s.m.failed.WithLabelValues(reason).Inc()
	s.log.Warn("upload: media failed for good; retried only by an operator", "media", rec.ID, "reason", reason, "err", msg)
	return &rec, nil
}

// failedRecord returns the store record of key when it is failed.
func (s *Server) failedRecord(ctx context.Context, key string) (Record, bool) {
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	rec, ok, err := readRecord(sctx, s.st, key)
	return rec, err == nil && ok && rec.State == StateFailed
}

// RetryMedia implements willowv1.UploadServer: it puts a failed media item
// back to processing and journals its compress at once. A pool-2 item
// whose bytes are still in pool 2 must be retried on the front that holds
// them (FAILED_PRECONDITION wrong_front names it). Retrying an item that
// is not failed answers FAILED_PRECONDITION not_failed.
func (s *Server) RetryMedia(ctx context.Context, req *willowv1.RetryMediaRequest) (*willowv1.Media, error) {
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return nil, fail(ReasonBadMediaID, "%v", err)
	}
	unlock := s.lock(id.Key)
	defer unlock()
	rec, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.State != StateFailed {
		return nil, fail(ReasonNotFailed, "media %s is %s, not failed", id, rec.State)
	}
	inPool2 := false
	if rec.Location == LocationPool2 {
		if id.Node != s.nodeID {
			return nil, fail(ReasonWrongFront, "media %s is in pool 2 of %s; retry it there", id, id.Node)
		}
		if p := s.pools[2]; p != nil {
			_, perr := p.Stat(media.RawKey(id.Key))
			inPool2 = perr == nil
		}
	}
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	if inPool2 {
		// The pool holds the bytes and the original record: without a
		// store record the job compresses from the pool again.
		err = s.st.Delete(sctx, media.RecordKey(id.Key))
		if e, perr := s.pools[2].Stat(media.RawKey(id.Key)); perr == nil {
			_ = json.Unmarshal(e.Meta, &rec)
		}
	} else {
		rec.State, rec.Reason, rec.Error, rec.FailedAt, rec.Attempts = StateProcessing, "", "", time.Time{}, 0
		err = writeRecord(sctx, s.st, rec)
	}
	if err != nil {
		return nil, fail(ReasonStoreUnavailable, "store: %v", err)
	}
	if err := s.journal.Add(ctx, job{Key: id.Key, MediaID: rec.ID, Business: rec.Business, NextAt: s.now().UnixMilli()}); err != nil {
		return nil, errInternal(err)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	s.log.Info("upload: failed media retried by an operator", "media", id)
	rec.State = StateProcessing
	return rec.mediaProto(), nil
}

// retryDelay is the backoff before attempt n+1 of a job whose attempt n
// failed with err: exponential from RetryMin, capped at RetryMax, with
// "equal jitter" (half fixed, half random) so a compress outage does not
// bring every job back at the same instant, and never shorter than the
// retry-after hint of an overloaded compress worker.
func (s *Server) retryDelay(n int, err error) time.Duration {
	back := s.cfg.RetryMin << min(max(n-1, 0), 30)
	if back > s.cfg.RetryMax || back <= 0 {
		back = s.cfg.RetryMax
	}
	back = back/2 + time.Duration(s.rand()*float64(back/2))
	if ra := rpcstatus.RetryAfter(err); ra > back {
		back = ra
	}
	return back
}
