package upload

import (
	"context"
	"errors"
	"io"
	"regexp"

	"willow/auth"
	"willow/limits"
	"willow/media"
	"willow/mediaheader"
	willowv1 "willow/proto/willow/v1"
)

var uploadIDRe = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)

// Begin implements willowv1.UploadServer over beginSession; gRPC clients
// always declare the SHA-256.
func (s *Server) Begin(ctx context.Context, req *willowv1.BeginRequest) (*willowv1.BeginResponse, error) {
	ss, err := s.beginSession(ctx, BeginParams{
		UploadID: req.GetUploadId(), Token: req.GetToken(), Business: req.GetBusiness(), User: req.GetUser(),
		Kind: req.GetKind(), Size: req.GetSize(), SHA256: req.GetSha256(), ContentType: req.GetContentType(), Filename: req.GetFilename(),
		requireSHA256: true,
	})
	if err != nil {
		return nil, err
	}
	resp := &willowv1.BeginResponse{UploadId: req.GetUploadId(), MaxChunkBytes: MaxChunkBytes, Offset: ss.Offset}
	if ss.Committed != nil {
		resp.Committed, resp.MediaId = true, ss.Committed.MediaID
	}
	return resp, nil
}

// resolve finds the staged upload a chunk belongs to: by user and upload
// ID when the chunk names its user, else by upload ID alone among the
// uploads not yet committed.
func (s *Server) resolve(ctx context.Context, uploadID, user string) (*staged, error) {
	notBegun := fail(ReasonUnknownUpload, "upload %q not begun on this front", uploadID)
	if user != "" {
		key := media.KeyFor(user, uploadID)
		st, err := s.localOrAdopted(ctx, key)
		if err != nil {
			return nil, errInternal(err)
		}
		if st == nil {
			if eerr := s.expiredErr(key, uploadID); eerr != nil {
				return nil, eerr
			}
			return nil, notBegun
		}
		if s.isExpired(st) {
			return nil, s.expiredNow(st)
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
			return nil, fail(ReasonAmbiguousUploadID, "upload ID %q is in use by several users: set Chunk.user", uploadID)
		default:
			found = st
		}
	}
	if found == nil {
		found = committed // chunks after commit: already_committed
	}
	if found == nil {
		if eerr := s.expiredErr("", uploadID); eerr != nil {
			return nil, eerr
		}
		return nil, notBegun
	}
	if s.isExpired(found) {
		return nil, s.expiredNow(found)
	}
	return found, nil
}

func chunkErr(err error) error {
	switch {
	case errors.Is(err, errCommitted):
		return fail(ReasonAlreadyCommitted, "%v", err)
	case errors.Is(err, errGap):
		return fail(ReasonChunkOutOfOrder, "%v", err)
	case errors.Is(err, errRange):
		return fail(ReasonChunkOutOfRange, "%v", err)
	case errors.Is(err, errMismatch):
		return fail(ReasonChunkMismatch, "%v", err)
	case errors.Is(err, errTooBig):
		return fail(ReasonChunkTooLarge, "%v", err)
	case errors.Is(err, errMoved):
		return fail(ReasonUploadMoved, "%v; continue there", err)
	}
	return errInternal(err)
}

// Chunks implements willowv1.UploadServer: it writes each chunk at its
// offset, and fsyncs before it reports the durable offset. A stream that
// breaks keeps what it made durable.
func (s *Server) Chunks(raw willowv1.Upload_ChunksServer) error {
	stream, done, err := s.limitChunks(raw) // idle timeout, stream caps, field lengths
	if err != nil {
		return err
	}
	defer done()
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
				return chunkErr(err)
			}
			// An authenticated client's chunks belong to its own uploads
			// only (auth.ActAs: its token's user, never another's).
			user, err := auth.ActAs(stream.Context(), c.GetUser())
			if err != nil {
				return err
			}
			if cur, err = s.resolve(stream.Context(), c.GetUploadId(), user); err != nil {
				return err
			}
			curID, curUser = c.GetUploadId(), c.GetUser()
		}
		// writeSession rejects a pixel bomb as soon as its header is in,
		// not after the whole file.
		err = s.writeSessionSegs(cur, c.GetOffset(), c.data())
		c.release() // the data is written and hashed: its buffer may be reused
		if err != nil {
			_, _ = syncAll()
			return err
		}
	}
	off, err := syncAll()
	if err != nil {
		return chunkErr(err)
	}
	return stream.SendAndClose(&willowv1.ChunksResponse{Offset: off})
}

// Status implements willowv1.UploadServer.
func (s *Server) Status(ctx context.Context, req *willowv1.StatusRequest) (*willowv1.StatusResponse, error) {
	if err := checkIDs(req.GetUploadId(), req.GetUser()); err != nil {
		return nil, err
	}
	user, err := auth.ActAs(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	key := media.KeyFor(user, req.GetUploadId())
	st, err := s.localOrAdopted(ctx, key)
	if err != nil {
		return nil, errInternal(err)
	}
	if s.isExpired(st) {
		return nil, s.expiredNow(st)
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
		return nil, fail(ReasonStoreUnavailable, "store: %v", err)
	}
	if !ok {
		if eerr := s.expiredErr(key, req.GetUploadId()); eerr != nil {
			return nil, eerr
		}
		return nil, fail(ReasonUnknownUpload, "no upload %q for this user", req.GetUploadId())
	}
	return &willowv1.StatusResponse{Offset: rec.Size, Size: rec.Size, Committed: true, MediaId: rec.ID, State: "committed"}, nil
}

// checkPixels reads the image header (never the pixels) and rejects a
// width x height over max. Unknown formats (HEIC) pass: the compress
// worker checks them with its own header reader.
func checkPixels(r io.ReaderAt, size, max int64) error {
	_, w, h, err := mediaheader.Check(io.NewSectionReader(r, 0, size), max)
	if errors.Is(err, mediaheader.ErrPixelBomb) {
		return fail(limits.ReasonPixelBomb, "image header claims %dx%d, over %d pixels", w, h, max)
	}
	// Anything else (a header not complete yet, a format the header reader
	// does not know, a corrupt file) is the compress worker's to judge.
	return nil
}

// Commit implements willowv1.UploadServer over commitSession: verify, make
// the raw durable in the store or a pool with its record, journal the
// compress, acknowledge.
func (s *Server) Commit(ctx context.Context, req *willowv1.CommitRequest) (*willowv1.CommitResponse, error) {
	if err := checkIDs(req.GetUploadId(), req.GetUser()); err != nil {
		return nil, err
	}
	user, err := auth.ActAs(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	o, err := s.commitSession(ctx, media.KeyFor(user, req.GetUploadId()), true)
	if err != nil {
		return nil, err
	}
	if o.Variants == nil {
		o.Variants = []*willowv1.Variant{}
	}
	return &willowv1.CommitResponse{MediaId: o.MediaID, Location: o.Location, Variants: o.Variants, Duplicate: o.Duplicate, Region: o.Region,
		State: o.State, Reason: o.Reason, Error: o.Error}, nil
}
