package upload

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"willow/media"
	"willow/mediaheader"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/token"
)

var uploadIDRe = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)

// Begin implements willowv1.UploadServer.
func (s *Server) Begin(ctx context.Context, req *willowv1.BeginRequest) (*willowv1.BeginResponse, error) {
	if !uploadIDRe.MatchString(req.GetUploadId()) {
		return nil, invalid("bad_upload_id", "upload_id must be 1-128 of [A-Za-z0-9._:-]")
	}
	if req.GetUser() == "" || len(req.GetUser()) > 128 {
		return nil, invalid("bad_user", "user is required")
	}
	claims, err := token.Verify(s.cfg.Secret, req.GetToken(), s.now())
	switch {
	case errors.Is(err, token.ErrExpired):
		return nil, rpcstatus.New(codes.Unauthenticated, "token_expired", "upload token expired")
	case err != nil:
		return nil, rpcstatus.New(codes.Unauthenticated, "token_invalid", "upload token invalid")
	case claims.User != req.GetUser() || claims.Business != req.GetBusiness():
		return nil, rpcstatus.New(codes.Unauthenticated, "token_invalid", "upload token is for another user or business")
	}
	if !s.known[req.GetBusiness()] {
		return nil, invalid("unknown_business", "unknown business %q", req.GetBusiness())
	}
	var limit int64
	switch req.GetKind() {
	case willowv1.Kind_KIND_IMAGE:
		limit = s.cfg.MaxImageBytes
	case willowv1.Kind_KIND_VIDEO:
		limit = s.cfg.MaxVideoBytes
	default:
		return nil, invalid("bad_kind", "kind must be image or video")
	}
	if req.GetSize() <= 0 {
		return nil, invalid("bad_size", "size must be positive")
	}
	if req.GetSize() > limit {
		return nil, invalid("too_large", "%d bytes over the %s limit of %d", req.GetSize(), kindName(req.GetKind()), limit)
	}
	sum := strings.ToLower(req.GetSha256())
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return nil, invalid("bad_sha256", "sha256 must be 64 hex digits")
	}
	key := media.KeyFor(req.GetUser(), req.GetUploadId())
	resp := &willowv1.BeginResponse{UploadId: req.GetUploadId(), MaxChunkBytes: MaxChunkBytes}

	st, err := s.staged(key)
	if err != nil {
		return nil, errInternal(err)
	}
	if st != nil {
		if c := st.Committed(); c != nil {
			resp.Committed, resp.MediaId, resp.Offset = true, c.MediaID, st.meta.Size
			return resp, nil
		}
		if st.meta.Size != req.GetSize() || st.meta.SHA256 != sum || st.meta.Kind != int32(req.GetKind()) {
			return nil, invalid("upload_conflict", "upload %s was begun with another size, kind or sha256", req.GetUploadId())
		}
		_, resp.Offset = st.Offsets()
		return resp, nil
	}
	if rec, ok, err := s.findCommitted(ctx, key); err != nil {
		// The store is down: go on. If this upload was committed long ago
		// and its staging forgotten, its record still wins at drain.
		s.log.Warn("upload: begin: store lookup failed", "key", key, "err", err)
	} else if ok {
		resp.Committed, resp.MediaId, resp.Offset = true, rec.ID, rec.Size
		return resp, nil
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
			return nil, rpcstatus.Overload(reason, shedding.RetryAfterShedRatio, "shed: business %s over its shed_ratio", req.GetBusiness())
		case s.pools[1] == nil || k.Pool1 == "off":
			s.m.uploads.WithLabelValues("shed").Inc()
			return nil, rpcstatus.Overload(reason, shedding.RetryAfterOverload, "shed: upload front overloaded")
		}
	}
	meta := stageMeta{
		UploadID: req.GetUploadId(), User: req.GetUser(), Business: req.GetBusiness(), Kind: int32(req.GetKind()),
		Size: req.GetSize(), SHA256: sum, ContentType: req.GetContentType(), Filename: req.GetFilename(),
		Deferred: shed, Created: s.now(),
	}
	unlock := s.lock(key)
	defer unlock()
	if st, err = s.staged(key); err == nil && st == nil {
		st, err = createStaged(filepath.Join(s.upDir, key), meta)
	}
	if err != nil {
		return nil, errInternal(err)
	}
	s.mu.Lock()
	s.uploads[key] = st
	s.indexLocked(meta.UploadID, key)
	s.mu.Unlock()
	_, resp.Offset = st.Offsets()
	return resp, nil
}

// resolve finds the staged upload a chunk belongs to: by user and upload
// ID when the chunk names its user, else by upload ID alone among the
// uploads not yet committed.
func (s *Server) resolve(uploadID, user string) (*staged, error) {
	notBegun := rpcstatus.New(codes.NotFound, "unknown_upload", "upload %q not begun on this front", uploadID)
	if user != "" {
		st, err := s.staged(media.KeyFor(user, uploadID))
		if err != nil {
			return nil, errInternal(err)
		}
		if st == nil {
			return nil, notBegun
		}
		return st, nil
	}
	s.mu.Lock()
	keys := make([]string, 0, len(s.byID[uploadID]))
	for k := range s.byID[uploadID] {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	var found, committed *staged
	for _, k := range keys {
		st, err := s.staged(k)
		if err != nil {
			return nil, errInternal(err)
		}
		switch {
		case st == nil:
		case st.Committed() != nil:
			committed = st
		case found != nil:
			return nil, invalid("ambiguous_upload_id", "upload ID %q is in use by several users: set Chunk.user", uploadID)
		default:
			found = st
		}
	}
	if found == nil {
		found = committed // chunks after commit: already_committed
	}
	if found == nil {
		return nil, notBegun
	}
	return found, nil
}

func chunkErr(err error) error {
	switch {
	case errors.Is(err, errCommitted):
		return rpcstatus.New(codes.FailedPrecondition, "already_committed", "%v", err)
	case errors.Is(err, errGap):
		return invalid("chunk_out_of_order", "%v", err)
	case errors.Is(err, errRange):
		return invalid("chunk_out_of_range", "%v", err)
	case errors.Is(err, errMismatch):
		return invalid("chunk_mismatch", "%v", err)
	case errors.Is(err, errTooBig):
		return invalid("chunk_too_large", "%v", err)
	}
	return errInternal(err)
}

// Chunks implements willowv1.UploadServer: it writes each chunk at its
// offset, and fsyncs before it reports the durable offset. A stream that
// breaks keeps what it made durable.
func (s *Server) Chunks(stream willowv1.Upload_ChunksServer) error {
	var cur *staged
	var curID, curUser string
	syncAll := func() (int64, error) {
		if cur == nil {
			return 0, nil
		}
		return cur.Sync()
	}
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_, _ = syncAll()
			return err
		}
		if cur == nil || c.GetUploadId() != curID || c.GetUser() != curUser {
			if _, err := syncAll(); err != nil {
				return errInternal(err)
			}
			if cur, err = s.resolve(c.GetUploadId(), c.GetUser()); err != nil {
				return err
			}
			curID, curUser = c.GetUploadId(), c.GetUser()
		}
		if err := cur.Write(c.GetOffset(), c.GetData(), s.cfg.SyncEvery); err != nil {
			_, _ = syncAll()
			return chunkErr(err)
		}
		if willowv1.Kind(cur.meta.Kind) == willowv1.Kind_KIND_IMAGE {
			// Reject a pixel bomb as soon as its header is in, not after
			// the whole file.
			if err := cur.CheckHeaderOnce(func(r io.ReaderAt, n int64) error { return checkPixels(r, n, s.cfg.MaxPixels) }); err != nil {
				_, _ = syncAll()
				s.m.uploads.WithLabelValues("rejected").Inc()
				return err
			}
		}
	}
	off, err := syncAll()
	if err != nil {
		return errInternal(err)
	}
	return stream.SendAndClose(&willowv1.ChunksResponse{Offset: off})
}

// Status implements willowv1.UploadServer.
func (s *Server) Status(ctx context.Context, req *willowv1.StatusRequest) (*willowv1.StatusResponse, error) {
	key := media.KeyFor(req.GetUser(), req.GetUploadId())
	st, err := s.staged(key)
	if err != nil {
		return nil, errInternal(err)
	}
	if st != nil {
		if c := st.Committed(); c != nil {
			return &willowv1.StatusResponse{Offset: st.meta.Size, Size: st.meta.Size, Committed: true, MediaId: c.MediaID, State: "committed"}, nil
		}
		_, d := st.Offsets()
		return &willowv1.StatusResponse{Offset: d, Size: st.meta.Size, State: "staging"}, nil
	}
	rec, ok, err := s.findCommitted(ctx, key)
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, "store_unavailable", "store: %v", err)
	}
	if !ok {
		return nil, rpcstatus.New(codes.NotFound, "unknown_upload", "no upload %q for this user", req.GetUploadId())
	}
	return &willowv1.StatusResponse{Offset: rec.Size, Size: rec.Size, Committed: true, MediaId: rec.ID, State: "committed"}, nil
}

// checkPixels reads the image header (never the pixels) and rejects a
// width x height over max. Unknown formats (HEIC) pass: the compress
// worker checks them with its own header reader.
func checkPixels(r io.ReaderAt, size, max int64) error {
	_, w, h, err := mediaheader.Check(io.NewSectionReader(r, 0, size), max)
	if errors.Is(err, mediaheader.ErrPixelBomb) {
		return invalid("pixel_bomb", "image header claims %dx%d, over %d pixels", w, h, max)
	}
	// Anything else (a header not complete yet, a format the header reader
	// does not know, a corrupt file) is the compress worker's to judge.
	return nil
}

func (s *Server) duplicate(rec Record) *willowv1.CommitResponse {
	id, _ := media.Parse(rec.ID)
	return &willowv1.CommitResponse{MediaId: rec.ID, Location: rec.Location, Variants: rec.variantsProto(), Duplicate: true, Region: id.Region}
}

// Commit implements willowv1.UploadServer: verify, make the raw durable in
// the store or a pool with its record, journal the compress, acknowledge.
func (s *Server) Commit(ctx context.Context, req *willowv1.CommitRequest) (*willowv1.CommitResponse, error) {
	key := media.KeyFor(req.GetUser(), req.GetUploadId())
	unlock := s.lock(key)
	defer func() { unlock() }()
	st, err := s.staged(key)
	if err != nil {
		return nil, errInternal(err)
	}
	if st == nil || st.Committed() != nil {
		rec, ok, err := s.findCommitted(ctx, key)
		if err == nil && ok {
			s.m.uploads.WithLabelValues("duplicate").Inc()
			return s.duplicate(rec), nil
		}
		if st != nil {
			// Committed here but the record is unreadable (store down).
			c := st.Committed()
			s.m.uploads.WithLabelValues("duplicate").Inc()
			id, _ := media.Parse(c.MediaID)
			return &willowv1.CommitResponse{MediaId: c.MediaID, Location: c.Location, Duplicate: true, Region: id.Region}, nil
		}
		if err != nil {
			return nil, rpcstatus.New(codes.Unavailable, "store_unavailable", "store: %v", err)
		}
		return nil, rpcstatus.New(codes.NotFound, "unknown_upload", "no upload %q for this user", req.GetUploadId())
	}
	// Crashed after the record was written but before the marker?
	if rec, ok, err := s.findCommitted(ctx, key); err == nil && ok {
		_ = st.MarkCommitted(commitMarker{MediaID: rec.ID, Location: rec.Location, At: s.now()})
		s.m.uploads.WithLabelValues("duplicate").Inc()
		return s.duplicate(rec), nil
	}
	meta := st.meta
	durable, err := st.Sync()
	if err != nil {
		return nil, errInternal(err)
	}
	if durable != meta.Size {
		s.m.uploads.WithLabelValues("rejected").Inc()
		return nil, invalid("size_mismatch", "received %d of %d bytes", durable, meta.Size)
	}
	if got := st.Sum(); got != meta.SHA256 {
		s.m.uploads.WithLabelValues("rejected").Inc()
		if err := st.Reset(); err != nil {
			return nil, errInternal(err)
		}
		return nil, invalid("sha256_mismatch", "sha256 of the received bytes is %s, not %s; send them again", got, meta.SHA256)
	}
	ra, size := st.Reader()
	if willowv1.Kind(meta.Kind) == willowv1.Kind_KIND_IMAGE {
		if err := checkPixels(ra, size, s.cfg.MaxPixels); err != nil {
			s.m.uploads.WithLabelValues("rejected").Inc()
			return nil, err
		}
	}
	rec := Record{
		Kind: kindName(willowv1.Kind(meta.Kind)), Business: meta.Business, User: meta.User, UploadID: meta.UploadID,
		Size: meta.Size, SHA256: meta.SHA256, ContentType: meta.ContentType, State: StateProcessing,
		Variants: []VariantEntry{}, Created: s.now().UTC(),
	}
	loc, err := s.persist(ctx, key, &rec, ra, size, meta.Deferred)
	if err != nil {
		return nil, err
	}
	if loc != LocationPool1 {
		// The durable promise of variants, before the acknowledgement.
		if err := s.journal.Add(ctx, job{Key: key, MediaID: rec.ID, Business: rec.Business, NextAt: s.now().Add(s.cfg.RetryMin).UnixMilli()}); err != nil {
			return nil, errInternal(err)
		}
	}
	if err := st.MarkCommitted(commitMarker{MediaID: rec.ID, Location: loc, At: s.now()}); err != nil {
		s.log.Warn("upload: commit marker", "key", key, "err", err)
	}
	s.m.uploads.WithLabelValues(loc).Inc()
	s.m.bytes.Add(float64(size))
	resp := &willowv1.CommitResponse{MediaId: rec.ID, Location: loc, Region: s.region, Variants: []*willowv1.Variant{}}
	if loc != LocationPool1 {
		unlock()
		unlock = func() {}
		// First compress attempt right away, detached from the caller; the
		// journal retries it when it fails.
		j := job{Key: key, MediaID: rec.ID, Business: rec.Business}
		done := make(chan *Record, 1)
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CompressTimeout)
			defer cancel()
			r, err := s.runJob(cctx, j)
			if err != nil {
				r = nil
			}
			done <- r
		}()
		if s.cfg.CommitWait > 0 {
			t := time.NewTimer(s.cfg.CommitWait)
			defer t.Stop()
			select {
			case r := <-done:
				if r != nil {
					resp.Variants = r.variantsProto()
				}
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	return resp, nil
}
