package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"

	"willow/buffer"
	"willow/flex"
	"willow/media"
	"willow/mediaheader"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/store"
	"willow/token"
)

// Server is the upload front's gRPC service. Create with New, then Run.
type Server struct {
	willowv1.UnimplementedUploadServer

	cfg       Config
	node      *node.Node
	st        store.Store
	router    router
	compress  willowv1.CompressClient
	pools     [3]*buffer.Pool // index 1 and 2
	journal   journal
	now       func() time.Time
	wouldShed func(context.Context) (string, bool)
	log       *slog.Logger
	region    string
	nodeID    string
	known     map[string]bool
	upDir     string

	storeLim *rate.Limiter
	drainLim *rate.Limiter

	locks [256]sync.Mutex // per media key, striped: commit, drain, compress completion

	mu      sync.Mutex // guards uploads, byID, drainRunning, drained
	uploads map[string]*staged
	byID    map[string]map[string]bool // upload ID -> keys
	// drainRunning marks a background drain of pool N in progress.
	drainRunning [3]bool
	drained      [3][]time.Time // recent drain times, for the rate

	kick chan struct{}
	m    *metrics
}

type metrics struct {
	uploads  *prometheus.CounterVec
	bytes    prometheus.Counter
	spills   *prometheus.CounterVec
	journal  prometheus.Gauge
	drained  *prometheus.CounterVec
	compress *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_uploads_total",
			Help: "Upload commits by outcome (store, pool1, pool2, duplicate, rejected)."}, []string{"outcome"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_upload_bytes_total",
			Help: "Raw bytes of committed uploads."}),
		spills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_spills_total",
			Help: "Uploads spilled into a buffer pool, by pool and cause."}, []string{"pool", "cause"}),
		journal: prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_upload_journal_depth",
			Help: "Compress jobs waiting in the durable journal."}),
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_drained_total",
			Help: "Media moved from a buffer pool to the store."}, []string{"pool"}),
		compress: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_compress_total",
			Help: "Compress attempts by outcome (ok, error)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.uploads, m.bytes, m.spills, m.journal, m.drained, m.compress)
	return m
}

// New validates cfg, recovers the staging dir and registers the Upload
// service on deps.Node's gRPC server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if deps.Node == nil || deps.Store == nil {
		return nil, errors.New("upload: Deps.Node and Deps.Store are required")
	}
	nc := deps.Node.Config()
	s := &Server{
		cfg: cfg, node: deps.Node, st: deps.Store, compress: deps.Compress,
		now: deps.Now, wouldShed: deps.WouldShed, log: cfg.Logger,
		region: nc.Region, nodeID: nc.ID, known: map[string]bool{},
		upDir:   filepath.Join(cfg.StagingDir, "up"),
		uploads: map[string]*staged{}, byID: map[string]map[string]bool{},
		kick: make(chan struct{}, 1),
	}
	if deps.Router != nil {
		s.router = deps.Router
	}
	s.pools[1], s.pools[2] = deps.Pool1, deps.Pool2
	if s.now == nil {
		s.now = time.Now
	}
	if s.wouldShed == nil {
		s.wouldShed = shedding.WouldShed
	}
	if s.log == nil {
		s.log = deps.Node.Logger()
	}
	for _, b := range cfg.Businesses {
		s.known[b] = true
	}
	if err := os.MkdirAll(s.upDir, 0o755); err != nil {
		return nil, fmt.Errorf("upload: staging: %w", err)
	}
	fj, err := newFileJournal(filepath.Join(cfg.StagingDir, "journal"))
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	s.journal = fj
	if deps.Redis != nil {
		key := cfg.JournalKey
		if key == "" {
			key = "willow:upload:" + s.nodeID + ":compress"
		}
		s.journal = &fallbackJournal{primary: &redisJournal{rdb: deps.Redis, key: key}, file: fj,
			onErr: func(err error) { s.log.Warn("upload: redis journal failed; using the staging dir", "err", err) }}
	}
	k := deps.Node.Knobs()
	s.storeLim = rate.NewLimiter(rate.Limit(k.StoreWriteBudget), burst(k.StoreWriteBudget))
	s.drainLim = rate.NewLimiter(rate.Limit(k.Pool1DrainPerS), 1)
	deps.Node.OnKnobs(func(k flex.Knobs) {
		s.storeLim.SetLimit(rate.Limit(k.StoreWriteBudget))
		s.storeLim.SetBurst(burst(k.StoreWriteBudget))
		s.drainLim.SetLimit(rate.Limit(k.Pool1DrainPerS))
	})
	s.m = newMetrics(deps.Node.Registry())
	if err := s.scanStaging(); err != nil {
		return nil, fmt.Errorf("upload: staging: %w", err)
	}
	willowv1.RegisterUploadServer(deps.Node.Server(), s)
	return s, nil
}

func burst(perS float64) int {
	if perS < 1 {
		return 1
	}
	return int(perS)
}

// scanStaging indexes the staged uploads by upload ID.
func (s *Server) scanStaging() error {
	ents, err := os.ReadDir(s.upDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m, err := readStageMeta(filepath.Join(s.upDir, e.Name()))
		if err != nil {
			// Begin crashed before its metadata was durable: nothing was
			// acknowledged for it.
			_ = os.RemoveAll(filepath.Join(s.upDir, e.Name()))
			continue
		}
		s.indexLocked(m.UploadID, e.Name())
	}
	return nil
}

func (s *Server) indexLocked(uploadID, key string) {
	if s.byID[uploadID] == nil {
		s.byID[uploadID] = map[string]bool{}
	}
	s.byID[uploadID][key] = true
}

func (s *Server) lock(key string) func() {
	h := fnv.New32a()
	h.Write([]byte(key))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// staged returns the staged upload of key, from memory or disk, or nil.
func (s *Server) staged(key string) (*staged, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.uploads[key]; ok {
		return st, nil
	}
	dir := filepath.Join(s.upDir, key)
	if _, err := os.Stat(filepath.Join(dir, fileMeta)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	st, err := openStaged(dir)
	if err != nil {
		return nil, err
	}
	s.uploads[key] = st
	s.indexLocked(st.meta.UploadID, key)
	return st, nil
}

// Errors at the edge.
func errInternal(err error) error {
	return rpcstatus.New(codes.Internal, "internal", "%v", err)
}

func invalid(reason, format string, args ...any) error {
	return rpcstatus.New(codes.InvalidArgument, reason, format, args...)
}

var uploadIDRe = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)

func (s *Server) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.StoreTimeout)
}

// findCommitted looks for a committed record of key: the store, then the
// pools. A store error is returned; the caller decides.
func (s *Server) findCommitted(ctx context.Context, key string) (Record, bool, error) {
	for _, n := range []int{1, 2} {
		if p := s.pools[n]; p != nil {
			if e, err := p.Stat(media.RawKey(key)); err == nil {
				var rec Record
				if json.Unmarshal(e.Meta, &rec) == nil && rec.ID != "" {
					return rec, true, nil
				}
			}
		}
	}
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	return readRecord(ctx, s.st, key)
}

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

// persist makes the raw bytes and the record durable and returns where.
func (s *Server) persist(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64, deferred bool) (string, error) {
	k := s.node.Knobs()
	id := media.ID{Loc: media.LocStore, Region: s.region, Node: s.nodeID, Key: key}
	if p := s.pools[1]; p != nil && (k.Pool1 == "force" || (k.Pool1 == "auto" && deferred)) {
		cause := "force"
		if k.Pool1 != "force" {
			cause = "shed"
		}
		id.Loc = media.LocPool1
		rec.ID, rec.Location = id.String(), LocationPool1
		if err := s.appendPool(ctx, p, key, rec, ra, size); err != nil {
			s.log.Warn("upload: pool1 append failed; trying the store", "key", key, "err", err)
		} else {
			s.m.spills.WithLabelValues("pool1", cause).Inc()
			return LocationPool1, nil
		}
	}
	p2 := s.pools[2]
	if p2 != nil && k.Pool2 != "off" {
		cause := ""
		switch {
		case k.Pool2 == "force":
			cause = "force"
		case !s.storeLim.Allow():
			cause = "budget"
		}
		if cause != "" {
			if err := s.toPool2(ctx, p2, id, key, rec, ra, size); err == nil {
				s.m.spills.WithLabelValues("pool2", cause).Inc()
				return LocationPool2, nil
			}
		}
	}
	id.Loc = media.LocStore
	rec.ID, rec.Location = id.String(), LocationStore
	serr := s.toStore(ctx, key, rec, ra, size)
	if serr == nil {
		return LocationStore, nil
	}
	s.log.Warn("upload: store write failed", "key", key, "err", serr)
	if p2 != nil && k.Pool2 != "off" {
		if err := s.toPool2(ctx, p2, id, key, rec, ra, size); err == nil {
			s.m.spills.WithLabelValues("pool2", "store_error").Inc()
			return LocationPool2, nil
		}
	}
	return "", rpcstatus.New(codes.Unavailable, "store_unavailable", "raw bytes could not be made durable: %v", serr)
}

func (s *Server) toPool2(ctx context.Context, p *buffer.Pool, id media.ID, key string, rec *Record, ra io.ReaderAt, size int64) error {
	id.Loc = media.LocPool2
	rec.ID, rec.Location = id.String(), LocationPool2
	err := s.appendPool(ctx, p, key, rec, ra, size)
	if err != nil {
		s.log.Warn("upload: pool2 append failed", "key", key, "err", err)
	}
	return err
}

func (s *Server) appendPool(ctx context.Context, p *buffer.Pool, key string, rec *Record, ra io.ReaderAt, size int64) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	return p.Append(ctx, media.RawKey(key), b, io.NewSectionReader(ra, 0, size), size)
}

func (s *Server) toStore(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64) error {
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	ct := rec.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	if err := s.st.Put(ctx, media.RawKey(key), io.NewSectionReader(ra, 0, size), size, ct); err != nil {
		return err
	}
	return writeRecord(ctx, s.st, *rec)
}

// GetMedia implements willowv1.UploadServer.
func (s *Server) GetMedia(ctx context.Context, req *willowv1.GetMediaRequest) (*willowv1.Media, error) {
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return nil, invalid("bad_media_id", "%v", err)
	}
	rec, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return rec.mediaProto(), nil
}

// lookup finds the record of id: the store first (drained items are
// there), then this front's pools.
func (s *Server) lookup(ctx context.Context, id media.ID) (Record, error) {
	sctx, cancel := s.storeCtx(ctx)
	rec, ok, err := readRecord(sctx, s.st, id.Key)
	cancel()
	if ok {
		return rec, nil
	}
	mine := id.Node == s.nodeID
	if mine && id.Loc == media.LocPool1 && s.pools[1] != nil {
		if _, perr := s.pools[1].Stat(media.RawKey(id.Key)); perr == nil {
			return Record{}, rpcstatus.New(codes.NotFound, "processing", "media %s is buffered and not downloadable yet", id)
		}
	}
	if mine && id.Loc == media.LocPool2 && s.pools[2] != nil {
		if e, perr := s.pools[2].Stat(media.RawKey(id.Key)); perr == nil {
			if json.Unmarshal(e.Meta, &rec) != nil {
				return Record{}, errInternal(fmt.Errorf("pool2 record of %s unreadable", id))
			}
			rec.Variants = s.poolVariants(id.Key, rec.Kind)
			if len(rec.Variants) > 0 {
				rec.State = StateReady
			}
			return rec, nil
		}
	}
	if err != nil {
		return Record{}, rpcstatus.New(codes.Unavailable, "store_unavailable", "store: %v", err)
	}
	return Record{}, rpcstatus.New(codes.NotFound, "not_found", "no media %s", id)
}

// poolVariants lists the variants of key held in pool 2.
func (s *Server) poolVariants(key, kind string) []VariantEntry {
	out := []VariantEntry{}
	for _, name := range variantNames(kind) {
		e, err := s.pools[2].Stat(media.VariantKey(key, name))
		if err != nil {
			continue
		}
		var v VariantEntry
		if json.Unmarshal(e.Meta, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

const readChunk = 256 << 10

// ReadPool implements willowv1.UploadServer: it serves an item of pool 2
// (raw or a variant). Once the item is drained it serves it from the
// store, so readers keep working during and after a drain. Pool-1 items
// give NOT_FOUND "processing" until drained.
func (s *Server) ReadPool(req *willowv1.ReadPoolRequest, stream willowv1.Upload_ReadPoolServer) error {
	ctx := stream.Context()
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return invalid("bad_media_id", "%v", err)
	}
	variant := req.GetVariant()
	if variant == "" {
		variant = media.VariantRaw
	}
	if !media.ValidVariant(variant) {
		return invalid("bad_variant", "unknown variant %q", variant)
	}
	objKey := media.VariantKey(id.Key, variant)
	if variant == media.VariantRaw {
		objKey = media.RawKey(id.Key)
	}
	var rc io.ReadCloser
	var size int64
	var ctype, etag string
	if p := s.pools[2]; p != nil && id.Loc == media.LocPool2 {
		r, e, err := p.Get(objKey)
		if err == nil {
			rc, size = r, e.Size
			if variant == media.VariantRaw {
				var rec Record
				_ = json.Unmarshal(e.Meta, &rec)
				ctype, etag = rec.ContentType, rec.SHA256
			} else {
				var v VariantEntry
				_ = json.Unmarshal(e.Meta, &v)
				ctype, etag = v.ContentType, v.SHA256
			}
		} else if !errors.Is(err, buffer.ErrNotFound) {
			return errInternal(err)
		}
	}
	if rc == nil {
		sctx, cancel := s.storeCtx(ctx)
		defer cancel()
		r, info, err := s.st.Get(sctx, objKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if _, lerr := s.lookup(ctx, id); lerr != nil {
				return lerr // not_found or processing
			}
			return rpcstatus.New(codes.NotFound, "processing", "variant %s of %s not made yet", variant, id)
		case err != nil:
			return rpcstatus.New(codes.Unavailable, "store_unavailable", "store: %v", err)
		}
		rc, size, ctype, etag = r, info.Size, info.ContentType, info.ETag
	}
	defer rc.Close()
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	buf := make([]byte, readChunk)
	first := true
	for {
		n, rerr := io.ReadFull(rc, buf)
		if n > 0 || first {
			msg := &willowv1.DataChunk{Data: buf[:n]}
			if first {
				msg.Size, msg.ContentType, msg.Etag = size, ctype, etag
				first = false
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			return nil
		}
		if rerr != nil {
			return errInternal(rerr)
		}
	}
}
