package upload

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/peer"

	"willow/auth"
	"willow/flex"
	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/token"
)

// The session API is the transport-neutral core of an upload: the gRPC
// handlers (Begin, Chunks, Status, Commit) and the HTTP protocols (tus
// 1.0.0, IETF resumable uploads) are thin adapters over it, so every
// transport gets the same staging, limits, verification, idempotency,
// shedding, pool spill, durability and compress journal. Its errors are
// gRPC status errors with a reason (rpcstatus); the HTTP edge maps them to
// HTTP statuses in one place (httpError).

// BeginParams is a transport's request to begin, or resume, an upload.
type BeginParams struct {
	UploadID string
	Token    string
	Business string
	User     string
	Kind     willowv1.Kind
	Size     int64
	// SHA256 is the hex SHA-256 of the whole upload, verified at commit;
	// "" when the transport does not know it up front (tus, IETF): those
	// verify each request's bytes with their own checksums and the
	// front records the SHA-256 of what it received.
	SHA256      string
	ContentType string
	Filename    string
	// requireSHA256: SHA256 must be given (gRPC).
	requireSHA256 bool
}

// SessionState is what the front knows of one upload.
type SessionState struct {
	Key string
	// Offset is the durable offset: resume from here.
	Offset  int64
	Size    int64
	Created time.Time
	// Expires is when the staged bytes are removed if not committed.
	Expires time.Time
	// Committed is set once the upload was committed (here or before).
	Committed *Outcome
	Meta      SessionMeta
}

// SessionMeta is what the upload was begun with.
type SessionMeta struct {
	UploadID, User, Business, ContentType, Filename string
	Kind                                            willowv1.Kind
}

// Outcome is a committed upload.
type Outcome struct {
	MediaID  string
	Location string // store | pool1 | pool2
	Region   string
	Variants []*willowv1.Variant
	// Duplicate: the upload ID was committed before; nothing new was
	// stored.
	Duplicate bool
	// State is the media state when the outcome was made: processing,
	// ready or failed (Reason and Error say why: the bytes cannot be made
	// into variants; the upload is acknowledged but unusable).
	State, Reason, Error string
}

// verifyToken checks an upload token and returns its claims.
func (s *Server) verifyToken(tok string) (token.Claims, error) {
	claims, err := token.Verify(s.cfg.Secret, tok, s.now())
	switch {
	case errors.Is(err, token.ErrExpired):
		return claims, fail(auth.ReasonTokenExpired, "upload token expired")
	case err != nil:
		return claims, fail(ReasonTokenInvalid, "upload token invalid")
	}
	return claims, nil
}

// sizeLimit is the size limit of kind, or an error for an unknown kind.
func (s *Server) sizeLimit(k willowv1.Kind) (int64, error) {
	switch k {
	case willowv1.Kind_KIND_IMAGE:
		return s.cfg.Limits.MaxImageBytes, nil
	case willowv1.Kind_KIND_VIDEO:
		return s.cfg.Limits.MaxVideoBytes, nil
	}
	return 0, fail(ReasonBadKind, "kind must be image or video")
}

// MaxSize is the largest upload the front accepts (of any kind).
func (s *Server) MaxSize() int64 { return max(s.cfg.Limits.MaxImageBytes, s.cfg.Limits.MaxVideoBytes) }

// stateOf describes a staged upload.
func (s *Server) stateOf(key string, st *staged) SessionState {
	m := st.meta
	ss := SessionState{
		Key: key, Size: m.Size, Created: m.Created, Expires: m.Created.Add(s.cfg.StagingTTL),
		Meta: SessionMeta{UploadID: m.UploadID, User: m.User, Business: m.Business, ContentType: m.ContentType,
			Filename: m.Filename, Kind: willowv1.Kind(m.Kind)},
	}
	if c := st.Committed(); c != nil {
		id, _ := media.Parse(c.MediaID)
		ss.Offset = m.Size
		ss.Committed = &Outcome{MediaID: c.MediaID, Location: c.Location, Region: id.Region, Duplicate: true}
		return ss
	}
	_, ss.Offset = st.Offsets()
	return ss
}

func stateOfRecord(key string, rec Record) SessionState {
	id, _ := media.Parse(rec.ID)
	return SessionState{
		Key: key, Offset: rec.Size, Size: rec.Size, Created: rec.Created,
		Committed: &Outcome{MediaID: rec.ID, Location: rec.Location, Region: id.Region, Variants: rec.variantsProto(), Duplicate: true,
			State: rec.State, Reason: rec.Reason, Error: rec.Error},
		Meta: SessionMeta{UploadID: rec.UploadID, User: rec.User, Business: rec.Business, ContentType: rec.ContentType,
			Kind: kindOf(rec.Kind)},
	}
}

// beginSession validates p (token, business, kind, size limit) and returns
// the upload's state: new, resumed (Offset), or committed before. A new
// upload goes through the admission decision deferred to it (see
// shedding.WouldShed in ctx): shed_ratio, or overload without pool 1,
// rejects it RESOURCE_EXHAUSTED; overload with pool 1 marks it for pool 1.
func (s *Server) beginSession(ctx context.Context, p BeginParams) (SessionState, error) {
	if !uploadIDRe.MatchString(p.UploadID) {
		return SessionState{}, fail(ReasonBadUploadID, "upload_id must be 1-128 of [A-Za-z0-9._:-]")
	}
	if len(p.User) > MaxUserLen {
		return SessionState{}, fail(ReasonBadUser, "user is required, at most %d bytes", MaxUserLen)
	}
	if err := checkLen("filename", p.Filename, MaxFilenameLen); err != nil {
		return SessionState{}, err
	}
	if err := checkLen("content_type", p.ContentType, MaxContentTypeLen); err != nil {
		return SessionState{}, err
	}
	user, err := s.beginUser(ctx, p.User, p.Business, p.Token)
	if err != nil {
		return SessionState{}, err
	}
	if p.User = user; p.User == "" {
		return SessionState{}, fail(ReasonBadUser, "user is required")
	}
	if !flex.KnownBusiness(p.Business) {
		return SessionState{}, fail(flex.ReasonUnknownBusiness, "unknown business %q", p.Business)
	}
	limit, err := s.sizeLimit(p.Kind)
	if err != nil {
		return SessionState{}, err
	}
	if p.Size <= 0 {
		return SessionState{}, fail(ReasonBadSize, "size must be positive")
	}
	if p.Size > limit {
		return SessionState{}, fail(limits.ReasonTooLarge, "%d bytes over the %s limit of %d", p.Size, kindName(p.Kind), limit)
	}
	sum := strings.ToLower(p.SHA256)
	if (sum != "" || p.requireSHA256) && (len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "") {
		return SessionState{}, fail(ReasonBadSHA256, "sha256 must be 64 hex digits")
	}
	key := media.KeyFor(p.User, p.UploadID)
	// Staged here, or on another front of the region (adopted from the
	// store's copy: resume.go).
	st, err := s.localOrAdopted(ctx, key)
	if err != nil {
		return SessionState{}, errInternal(err)
	}
	if st != nil && st.Committed() == nil && s.now().After(st.meta.Created.Add(s.cfg.StagingTTL)) {
		// Abandoned past its TTL: start over rather than resume bytes the
		// staging GC is about to remove.
		unlock := s.lock(key)
		s.markExpired(key, st.meta.UploadID)
		s.forgetLocked(key, st.meta.UploadID)
		s.unmirror(key, nil)
		unlock()
		st = nil
	}
	if st != nil {
		if st.Committed() == nil && (st.meta.Size != p.Size || st.meta.SHA256 != sum || st.meta.Kind != int32(p.Kind)) {
			return SessionState{}, fail(ReasonUploadConflict, "upload %s was begun with another size, kind or sha256", p.UploadID)
		}
		return s.stateOf(key, st), nil
	}
	if rec, ok, err := s.findCommitted(ctx, key); err != nil {
		// The store is down: go on. If this upload was committed long ago
		// and its staging forgotten, its record still wins at drain.
		s.log.Warn("upload: begin: store lookup failed", "key", key, "err", err)
	} else if ok {
		return stateOfRecord(key, rec), nil
	}
	if err := s.retiringErr(); err != nil {
		return SessionState{}, err
	}
	// Admission deferred its decision for Begin: an overloaded front spills
	// the new upload into pool 1 when it can; otherwise, and for coarse
	// shed_ratio shedding of the business, it rejects it here.
	reason, shed := s.wouldShed(ctx)
	if shed {
		k := s.node.Knobs()
		switch {
		case reason == shedding.ReasonShedRatio:
			s.m.uploads.WithLabelValues("shed").Inc()
			return SessionState{}, rpcstatus.Overload(reason, shedding.RetryAfterShedRatio, "shed: business %s over its shed_ratio", p.Business)
		case s.pools[1] == nil || k.Pool1 == flex.PoolOff:
			s.m.uploads.WithLabelValues("shed").Inc()
			return SessionState{}, rpcstatus.Overload(reason, shedding.RetryAfterOverload, "shed: upload front overloaded")
		}
	}
	meta := stageMeta{
		UploadID: p.UploadID, User: p.User, Business: p.Business, Kind: int32(p.Kind),
		Size: p.Size, SHA256: sum, ContentType: p.ContentType, Filename: p.Filename,
		Deferred: shed, Created: s.now(),
	}
	if err := s.checkBudget(p.Size); err != nil {
		return SessionState{}, err
	}
	unlock := s.lock(key)
	defer unlock()
	if st, err = s.staged(key); err == nil && st == nil {
		if err := s.hold.addStaged(key, connOf(peer.FromContext(ctx)), p.User, s.cfg.MaxStagedPerConn, s.cfg.MaxStagedPerUser); err != nil {
			return SessionState{}, err
		}
		if st, err = createStaged(filepath.Join(s.upDir, key), meta); err != nil {
			s.hold.dropStaged(key)
		} else {
			_ = s.attachMirror(key, st, 1, nil, false)
			s.reserve(key, meta.Size)
			s.unmarkExpired(key, meta.UploadID)
			s.commits.begun.Add(1)
		}
	}
	if err != nil {
		return SessionState{}, errInternal(err)
	}
	s.mu.Lock()
	s.uploads[key] = st
	s.indexLocked(meta.UploadID, key)
	s.mu.Unlock()
	return s.stateOf(key, st), nil
}

// sessionOf returns the state of the upload key of user: staged here, or
// committed (here, in the store or a pool). st is nil for an upload known
// only by its record. Errors: NOT_FOUND unknown_upload (also for another
// user's upload), upload_expired (staged longer than StagingTTL, not
// committed), UNAVAILABLE store_unavailable.
func (s *Server) sessionOf(ctx context.Context, key, user string) (*staged, SessionState, error) {
	unknown := fail(ReasonUnknownUpload, "no upload %s for this user", key)
	if len(key) != 32 || strings.Trim(key, "0123456789abcdef") != "" {
		return nil, SessionState{}, unknown
	}
	st, err := s.localOrAdopted(ctx, key)
	if err != nil {
		return nil, SessionState{}, errInternal(err)
	}
	if st != nil {
		if st.meta.User != user {
			return nil, SessionState{}, unknown
		}
		ss := s.stateOf(key, st)
		if ss.Committed == nil && s.now().After(ss.Expires) {
			return nil, SessionState{}, fail(ReasonUploadExpired,
				"upload %s expired at %s without being completed", key, ss.Expires.UTC().Format(time.RFC3339))
		}
		return st, ss, nil
	}
	rec, ok, err := s.findCommitted(ctx, key)
	if err != nil {
		return nil, SessionState{}, fail(ReasonStoreUnavailable, "store: %v", err)
	}
	if !ok {
		if eerr := s.expiredErr(key, ""); eerr != nil {
			return nil, SessionState{}, eerr
		}
	}
	if !ok || rec.User != user {
		return nil, SessionState{}, unknown
	}
	return nil, stateOfRecord(key, rec), nil
}

// writeSession appends data at off to a staged upload (duplicates of bytes
// already received are accepted; see staged.Write) and, for an image,
// refuses a pixel bomb as soon as its header is in.
func (s *Server) writeSession(st *staged, off int64, data []byte) error {
	return s.writeSessionSegs(st, off, [][]byte{data})
}

// writeSessionSegs is writeSession for data given as consecutive segments
// (staged.WriteSegs).
func (s *Server) writeSessionSegs(st *staged, off int64, segs [][]byte) error {
	if err := sniffEarly(st, off, segs); err != nil {
		s.m.uploads.WithLabelValues("rejected").Inc()
		return err
	}
	if err := st.WriteSegs(off, segs, s.cfg.SyncEvery); err != nil {
		return chunkErr(err)
	}
	if willowv1.Kind(st.meta.Kind) == willowv1.Kind_KIND_IMAGE {
		if err := st.CheckHeaderOnce(func(r io.ReaderAt, n int64) error { return checkPixels(r, n, s.cfg.Limits.MaxPixels) }); err != nil {
			s.m.uploads.WithLabelValues("rejected").Inc()
			return err
		}
	}
	return nil
}

// terminateSession drops a staged, uncommitted upload (tus termination,
// IETF cancellation). A committed upload is never removed: FAILED_PRECONDITION
// already_committed.
func (s *Server) terminateSession(key string) error {
	unlock := s.lock(key)
	defer unlock()
	st, err := s.staged(key)
	if err != nil {
		return errInternal(err)
	}
	if st == nil {
		return fail(ReasonUnknownUpload, "no upload %s", key)
	}
	if st.Committed() != nil {
		return fail(ReasonAlreadyCommitted, "upload %s is committed; media are not deleted by the upload protocol", key)
	}
	s.forgetLocked(key, st.meta.UploadID)
	s.unmirror(key, nil)
	return nil
}

// forgetLocked removes the staging dir of key; the caller holds key's lock.
func (s *Server) forgetLocked(key, uploadID string) {
	s.mu.Lock()
	if st := s.uploads[key]; st != nil {
		st.Close()
	}
	delete(s.uploads, key)
	s.hold.dropStaged(key)
	delete(s.byID[uploadID], key)
	if len(s.byID[uploadID]) == 0 {
		delete(s.byID, uploadID)
	}
	s.mu.Unlock()
	_ = os.RemoveAll(filepath.Join(s.upDir, key))
	s.release(key)
}

func (s *Server) duplicateOutcome(rec Record) Outcome {
	id, _ := media.Parse(rec.ID)
	return Outcome{MediaID: rec.ID, Location: rec.Location, Variants: rec.variantsProto(), Duplicate: true, Region: id.Region,
		State: rec.State, Reason: rec.Reason, Error: rec.Error}
}

// commitSession verifies the upload key (size, SHA-256 when declared, the
// image header), makes the raw bytes and the record durable in the store
// or a pool, journals the compress job and only then returns; the first
// compress attempt runs at once and its variants are in the outcome when a
// worker starts it at once and it finishes within Config.CommitWait (when
// wait is set: a transport whose answer carries no variants, tus, does not
// wait). A task that would queue for a worker is not waited for: the
// outcome says processing and the task runs queued (the client polls the
// media's status). Committing a committed upload returns its outcome with
// Duplicate set.
func (s *Server) commitSession(ctx context.Context, key string, wait bool) (Outcome, error) {
	o, err := s.commitStaged(ctx, key, wait)
	s.commits.count(err)
	return o, err
}

// commitStaged is commitSession's work, whatever the protocol (gRPC
// Commit, tus, IETF).
func (s *Server) commitStaged(ctx context.Context, key string, wait bool) (_ Outcome, err error) {
	unlock := s.lock(key)
	defer func() { unlock() }()
	st, err := s.staged(key)
	if err != nil {
		return Outcome{}, errInternal(err)
	}
	if st == nil || st.Committed() != nil {
		rec, ok, err := s.findCommitted(ctx, key)
		if err == nil && ok {
			s.m.uploads.WithLabelValues("duplicate").Inc()
			go s.unmirror(key, nil)
			return s.duplicateOutcome(rec), nil
		}
		if st != nil {
			// Committed here but the record is unreadable (store down).
			c := st.Committed()
			s.m.uploads.WithLabelValues("duplicate").Inc()
			id, _ := media.Parse(c.MediaID)
			return Outcome{MediaID: c.MediaID, Location: c.Location, Duplicate: true, Region: id.Region}, nil
		}
		if err != nil {
			return Outcome{}, fail(ReasonStoreUnavailable, "store: %v", err)
		}
		return Outcome{}, fail(ReasonUnknownUpload, "no upload %s for this user", key)
	}
	// Crashed after the record was written but before the marker? The
	// compress job is written alongside the record, so it may be missing:
	// it is added again (replacing one that was there).
	if rec, ok, err := s.findCommitted(ctx, key); err == nil && ok {
		if rec.State == StateProcessing && rec.Location != LocationPool1 {
			if err := s.journal.Add(ctx, job{Key: key, MediaID: rec.ID, Business: rec.Business, NextAt: s.now().UnixMilli(),
				FirstAt: s.now().UnixMilli()}); err != nil {
				return Outcome{}, errInternal(err)
			}
		}
		_ = st.MarkCommitted(commitMarker{MediaID: rec.ID, Location: rec.Location, At: s.now()})
		go s.unmirror(key, nil)
		s.release(key)
		s.m.uploads.WithLabelValues("duplicate").Inc()
		return s.duplicateOutcome(rec), nil
	}
	meta := st.meta
	// A background copy of a range to the store is of no use once the
	// upload commits (the copy is removed after): stop it, keeping its
	// fsync.
	st.stopMirror()
	if err := s.checkOwner(st); err != nil {
		return Outcome{}, err
	}
	// The bytes need not be durable yet: the raw they become is fsynced
	// by persist. Their offset is recorded only if the commit fails, for
	// a transport that answers with an offset to resume from.
	defer func() {
		if err != nil {
			_, _ = st.Sync()
		}
	}()
	if written, _ := st.Offsets(); written != meta.Size {
		s.m.uploads.WithLabelValues("rejected").Inc()
		return Outcome{}, fail(ReasonSizeMismatch, "received %d of %d bytes", written, meta.Size)
	}
	got := st.Sum()
	if meta.SHA256 != "" && got != meta.SHA256 {
		s.m.uploads.WithLabelValues("rejected").Inc()
		if err := st.Reset(); err != nil {
			return Outcome{}, errInternal(err)
		}
		return Outcome{}, fail(ReasonSHA256Mismatch, "sha256 of the received bytes is %s, not %s; send them again", got, meta.SHA256)
	}
	ra, size := st.Reader()
	if willowv1.Kind(meta.Kind) == willowv1.Kind_KIND_IMAGE {
		if err := checkPixels(ra, size, s.cfg.Limits.MaxPixels); err != nil {
			s.m.uploads.WithLabelValues("rejected").Inc()
			return Outcome{}, err
		}
	}
	if willowv1.Kind(meta.Kind) == willowv1.Kind_KIND_VIDEO {
		if err := s.checkDuration(ra, size, meta.Business); err != nil {
			s.m.uploads.WithLabelValues("rejected").Inc()
			return Outcome{}, err
		}
	}
	// The stored content type is what the bytes are, never the client's.
	ctype, err := sniffUpload(ra, size, willowv1.Kind(meta.Kind))
	if err != nil {
		s.m.uploads.WithLabelValues("rejected").Inc()
		return Outcome{}, err
	}
	rec := Record{
		Kind: kindName(willowv1.Kind(meta.Kind)), Business: meta.Business, User: meta.User, UploadID: meta.UploadID,
		Size: meta.Size, SHA256: got, ContentType: ctype, State: StateProcessing,
		Variants: []VariantEntry{}, Created: s.now().UTC(),
	}
	// The compress job is the durable promise of variants, made before the
	// acknowledgement.
	newJob := func(r *Record) job {
		return job{Key: key, MediaID: r.ID, Business: r.Business, NextAt: s.now().Add(s.cfg.RetryMin).UnixMilli(),
			FirstAt: s.now().UnixMilli()}
	}
	loc, err := s.persist(ctx, key, &rec, ra, size, meta.Deferred, newJob)
	if err != nil {
		return Outcome{}, err
	}
	if err := st.MarkCommitted(commitMarker{MediaID: rec.ID, Location: loc, At: s.now()}); err != nil {
		s.log.Warn("upload: commit marker", "key", key, "err", err)
	}
	go s.unmirror(key, st) // the region's copy of the staged bytes
	s.hold.dropStaged(key)
	s.release(key)
	s.m.uploads.WithLabelValues(loc).Inc()
	s.m.bytes.Add(float64(size))
	out := Outcome{MediaID: rec.ID, Location: loc, Region: s.region, Variants: []*willowv1.Variant{}, State: StateProcessing}
	if loc != LocationPool1 {
		unlock()
		unlock = func() {}
		// First compress attempt right away, detached from the caller; the
		// journal retries it when it fails. The commit waits for it only
		// while a worker runs it: a task that would queue (no worker slot
		// free) is acknowledged processing at once and still runs, queued.
		j := job{Key: key, MediaID: rec.ID, Business: rec.Business}
		waitFor := wait && s.cfg.CommitWait > 0
		done := make(chan *Record, 1)
		queuedCh := make(chan struct{})
		var queued func()
		if waitFor {
			queued = func() { close(queuedCh) } // callCompress calls it once at most
		}
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CompressTimeout)
			defer cancel()
			r, err := s.runJob(cctx, j, queued)
			if err != nil {
				r = nil
			}
			done <- r
		}()
		if waitFor {
			t := time.NewTimer(s.cfg.CommitWait)
			defer t.Stop()
			select {
			case r := <-done:
				if r != nil {
					// Ready with its variants, or failed for good: the
					// client learns at once that its media cannot be used.
					out.Variants = r.variantsProto()
					out.State, out.Reason, out.Error = r.State, r.Reason, r.Error
				}
			case <-queuedCh:
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	return out, nil
}
