package edgecache

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/store"
)

// errPoolGone says pool 2 no longer holds an item (its front answered
// NOT_FOUND: drained): read the store instead. It is not a failure.
var errPoolGone = errors.New("not in pool 2")

// errPoolDown says the front named in a pool-2 ID cannot be asked (not
// listed by the master: down, killed, not yet re-registered): read the
// store instead, which has the item if it was drained. When the store
// does not have it either, the bytes are on a front that is down: the
// answer is UNAVAILABLE (ErrOrigin), not NOT_FOUND.
var errPoolDown = errors.New("pool 2 front unreachable")

// mdLastModified is the gRPC response header carrying an object's
// Last-Modified (Unix milliseconds), so every node of an OC answers with
// the owner's.
const mdLastModified = "willow-last-modified"

// req is one resolved download request.
type req struct {
	id       media.ID
	idStr    string
	variant  string
	format   string // FormatHEIC (the stored representation) or FormatJPEG
	fromPeer bool   // an OC peer asks as the owner: never forward
	who      caller
	key      string // idStr/variant, when the caller has it at hand
}

// base is the cache key of the stored representation; slices are
// base#N, the JPEG fallback base@jpeg. The ring places all of them by base.
func (r req) base() string {
	if r.key != "" {
		return r.key
	}
	return r.idStr + "/" + r.variant
}

// parseReq validates a media ID and variant; errors wrap ErrBadRequest.
func parseReq(idStr, variant string) (media.ID, error) {
	id, err := media.Parse(idStr)
	if err != nil {
		return media.ID{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if !media.ValidVariant(variant) {
		return media.ID{}, fmt.Errorf("%w: unknown variant %q", ErrBadRequest, variant)
	}
	return id, nil
}

type found struct {
	o    *object
	tier string
}

// caller names who a download is for: the owner peer ranks a forwarded
// request by it (shedding's willow-business and willow-user metadata).
type caller struct{ business, user string }

// cached looks key up in memory, the hot tier and the disk tier (a disk
// hit is promoted to memory).
func (s *Server) cached(key string) (*object, string, bool) {
	if o, ok := s.mem.get(key); ok {
		return o, tierMemory, true
	}
	if o, ok := s.hot.get(key); ok {
		return o, tierMemory, true
	}
	if s.disk != nil {
		if o, ok := s.disk.get(key); ok {
			s.mem.add(key, o)
			return o, tierDisk, true
		}
	}
	return nil, "", false
}

// keep caches o under key: in memory and on disk when this node owns it,
// in the hot tier when it came through (or instead of) its owner peer.
func (s *Server) keep(key string, o *object, owned bool) {
	if !owned {
		s.hot.add(key, o)
		return
	}
	s.mem.add(key, o)
	if s.disk != nil {
		if err := s.disk.add(key, o); err != nil {
			s.log.Warn("disk tier", "err", err)
		}
	}
}

// owner returns the ring owner of r and whether this node serves r from
// its own tiers and origin (it owns r, or a peer asked it as the owner).
func (s *Server) owner(r req) (string, bool) {
	o := s.ring.Load().Get(r.base())
	return o, r.fromPeer || o == s.self
}

// resolve returns the entry for key: cached, or filled once per node
// (singleflight; the fill is detached from the callers' cancellation and
// has its own deadlines).
func (s *Server) resolve(ctx context.Context, key string, owned bool, fill func(ctx context.Context) (found, error)) (*object, string, error) {
	if o, tier, ok := s.cached(key); ok {
		return o, tier, nil
	}
	ch := s.group.DoChan(key, func() (any, error) {
		if o, tier, ok := s.cached(key); ok {
			return found{o, tier}, nil
		}
		return fill(context.WithoutCancel(ctx))
	})
	select {
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, "", res.Err
		}
		f := res.Val.(found)
		return f.o, f.tier, nil
	}
}

// lookup returns the stored representation of r: a whole object, or the
// head of a sliced one (its bytes are read by s.open), and the tier.
func (s *Server) lookup(ctx context.Context, r req) (*object, string, error) {
	if o, tier, ok := s.cached(r.base()); ok {
		return o, tier, nil // a hit allocates nothing here
	}
	return s.lookupFill(ctx, r)
}

func (s *Server) lookupFill(ctx context.Context, r req) (*object, string, error) {
	owner, owned := s.owner(r)
	return s.resolve(ctx, r.base(), owned, func(ctx context.Context) (found, error) {
		return s.fillHead(ctx, r, owner, owned)
	})
}

// fillHead fetches the stored representation of r from the owner peer or
// origin, reading at most one slice: a larger object becomes a head plus
// its first slice, both cached.
func (s *Server) fillHead(ctx context.Context, r req, owner string, owned bool) (found, error) {
	if !owned && !s.peerDown(owner) {
		p, err := s.fetchPeer(shedding.WithRequest(ctx, r.who.business, r.who.user), owner, r, "", 0, s.cfg.SliceBytes)
		switch {
		case err == nil:
			return s.keepHead(r, p, false, tierPeer), nil
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrBadRequest), errors.Is(err, ErrTooLarge):
			return found{}, err
		}
		s.log.Warn("owner peer failed, reading origin", "owner", owner, "key", r.base(), "err", err)
		s.markDown(owner)
	}
	p, err := s.fetchOrigin(ctx, r)
	if err != nil {
		return found{}, err
	}
	return s.keepHead(r, p, owned, tierOrigin), nil
}

// part is what one fetch returned: bytes from offset 0 of an object of
// size bytes, with its headers.
type part struct {
	data        []byte
	size        int64
	contentType string
	etag        string
	modTime     time.Time
}

// keepHead caches what a head fill read: the whole object, or a head and
// slice 0 when the object is larger than one slice.
func (s *Server) keepHead(r req, p part, owned bool, tier string) found {
	ct := contentType(p.contentType, p.data)
	if int64(len(p.data)) >= p.size {
		etag := p.etag
		if etag == "" {
			etag = etagOf(p.data)
		}
		o := &object{data: p.data, size: p.size, contentType: ct, etag: etag, modTime: p.modTime}
		s.keep(r.base(), o, owned)
		return found{o, tier}
	}
	h := &object{size: p.size, contentType: ct, etag: p.etag, modTime: p.modTime, sliced: true}
	s.keep(r.base(), h, owned)
	s.keep(sliceKey(r.base(), 0), &object{data: p.data, size: int64(len(p.data))}, owned)
	return found{h, tier}
}

// fetchPeer reads bytes [off, off+n) (n 0: to the end) of r in format
// from the owner peer. Its NOT_FOUND and INVALID_ARGUMENT answers map to
// ErrNotFound and ErrBadRequest; any other error means the peer failed.
func (s *Server) fetchPeer(ctx context.Context, owner string, r req, format string, off, n int64) (part, error) {
	addr := (*s.peers.Load())[owner]
	if addr == "" {
		return part{}, errors.New("owner has no address")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	conn, err := s.conn(addr)
	if err != nil {
		return part{}, err
	}
	release, err := s.budget.acquire(ctx, cmp.Or(n, s.cfg.SliceBytes))
	if err != nil {
		return part{}, err
	}
	defer release()
	var hdr metadata.MD
	st, err := willowv1.NewEdgeCacheClient(conn).Get(ctx, &willowv1.GetRequest{
		MediaId: r.idStr, Variant: r.variant, Peer: true, Offset: off, Length: n, Format: format,
	}, grpc.Header(&hdr))
	if err != nil {
		return part{}, fromGRPC(err)
	}
	p, err := s.readChunks(st.Recv, n)
	if err != nil {
		return part{}, fromGRPC(err)
	}
	if v := first(hdr.Get(mdLastModified)); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			p.modTime = time.UnixMilli(ms).UTC()
		}
	}
	return p, nil
}

// fromGRPC maps a gRPC error of a peer or front back to this package's
// sentinels where one fits.
func fromGRPC(err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		if rpcstatus.Reason(err) == media.ReasonProcessing {
			return fmt.Errorf("%w (%s)", ErrProcessing, status.Convert(err).Message())
		}
		return fmt.Errorf("%w (%s)", ErrNotFound, status.Convert(err).Message())
	case codes.InvalidArgument:
		// Upload and compress send too_large as INVALID_ARGUMENT.
		if rpcstatus.Reason(err) == limits.ReasonTooLarge {
			return fmt.Errorf("%w (%s)", ErrTooLarge, status.Convert(err).Message())
		}
		return fmt.Errorf("%w (%s)", ErrBadRequest, status.Convert(err).Message())
	case codes.FailedPrecondition:
		// Another edge (grpc.go) sends too_large as FAILED_PRECONDITION.
		if rpcstatus.Reason(err) == limits.ReasonTooLarge {
			return fmt.Errorf("%w (%s)", ErrTooLarge, status.Convert(err).Message())
		}
	}
	return err
}

// readChunks collects a DataChunk stream. want > 0 is the most bytes the
// caller asked for; 0 means the whole object, which must then fit in
// MaxObjectBytes.
func (s *Server) readChunks(recv func() (*willowv1.DataChunk, error), want int64) (part, error) {
	var buf bytes.Buffer
	var p part
	limit := s.cfg.MaxObjectBytes
	if want > 0 {
		limit = want
	}
	first := true
	for {
		c, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return part{}, err
		}
		if first {
			first = false
			p.size, p.contentType, p.etag = c.GetSize(), c.GetContentType(), c.GetEtag()
			if want == 0 && p.size > s.cfg.MaxObjectBytes {
				return part{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, p.size)
			}
			buf.Grow(int(min(p.size, limit)))
		}
		if int64(buf.Len()+len(c.GetData())) > limit {
			if want == 0 {
				return part{}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
			}
			return part{}, fmt.Errorf("sent more than the %d bytes asked for", want)
		}
		buf.Write(c.GetData())
	}
	p.data = buf.Bytes()
	if first {
		return part{}, errors.New("empty stream")
	}
	return p, nil
}

// fetchOrigin reads the first slice of r (or all of it, for a store
// without ranged reads) from origin as its media ID says. A
// failed read is retried at most twice, on the other source (pool 2 ->
// store) or the store again, and only while the retries knob is on.
func (s *Server) fetchOrigin(ctx context.Context, r req) (part, error) {
	tries := 1
	if s.node.Knobs().Retries {
		tries = 3
	}
	id, variant := r.id, r.variant
	var poolErr error // pool 2 could not be read: its front is down or failed
	if id.Loc == media.LocPool2 {
		p, err := s.readPool(ctx, id, variant, 0, s.cfg.SliceBytes)
		switch {
		case err == nil:
			s.m.originFetches.WithLabelValues("pool2", "ok").Inc()
			return p, nil
		case errors.Is(err, errPoolGone):
			s.m.originFetches.WithLabelValues("pool2", "not_found").Inc()
		case errors.Is(err, ErrTooLarge):
			return part{}, err
		case errors.Is(err, errPoolDown):
			s.m.originFetches.WithLabelValues("pool2", "error").Inc()
			poolErr = err // the store may have it (drained before the front went)
		default:
			s.m.originFetches.WithLabelValues("pool2", "error").Inc()
			poolErr = err
			tries--
			if tries == 0 {
				return part{}, fmt.Errorf("%w: pool 2 of %s: %w", ErrOrigin, id.Node, err)
			}
			s.log.Warn("pool 2 read failed, retrying on the store", "id", id, "err", err)
		}
	}
	var last error
	for range tries {
		p, err := s.readStore(ctx, id, variant)
		switch {
		case err == nil:
			s.m.originFetches.WithLabelValues("store", "ok").Inc()
			return p, nil
		case errors.Is(err, store.ErrNotFound):
			s.m.originFetches.WithLabelValues("store", "not_found").Inc()
			if id.Loc == media.LocPool1 {
				return part{}, fmt.Errorf("%w: %s/%s", ErrProcessing, id, variant)
			}
			if poolErr != nil {
				// Not drained yet, and the front holding it is down.
				return part{}, fmt.Errorf("%w: %s/%s is in pool 2 of %s, which cannot be read (%w), and not in the store yet",
					ErrOrigin, id, variant, id.Node, poolErr)
			}
			if variant != media.VariantRaw {
				if ferr := s.failedOf(ctx, id); ferr != nil {
					return part{}, ferr // failed for good: 422, not 404
				}
			}
			return part{}, fmt.Errorf("%w: %s/%s", ErrNotFound, id, variant)
		case errors.Is(err, ErrTooLarge):
			return part{}, err
		}
		s.m.originFetches.WithLabelValues("store", "error").Inc()
		last = err
	}
	return part{}, fmt.Errorf("%w: store: %w", ErrOrigin, last)
}

// storeKey is the store key of one variant.
func storeKey(id media.ID, variant string) string {
	if variant == media.VariantRaw {
		return media.RawKey(id.Key)
	}
	return media.VariantKey(id.Key, variant)
}

// readStore reads the first slice of a variant from the store (the whole
// of it when it fits in one slice or the store has no ranged reads). The
// ETag of a sliced object is the content SHA-256 from the media record,
// so it equals that of the whole bytes; without a record it is derived
// from the store's size, time and ETag.
func (s *Server) readStore(ctx context.Context, id media.ID, variant string) (part, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	key := storeKey(id, variant)
	var rc io.ReadCloser
	var info store.Info
	var err error
	want := int64(0)
	rg, ranged := s.store.(store.RangeGetter)
	// Every path gives its fill memory back, a failed read included (a
	// variant polled before it exists must not leak budget).
	if ranged && s.cfg.SliceBytes > 0 {
		want = s.cfg.SliceBytes
		release, aerr := s.budget.acquire(ctx, want)
		if aerr != nil {
			return part{}, aerr
		}
		defer release()
		rc, info, err = rg.GetRange(ctx, key, 0, want)
	} else {
		rc, info, err = s.store.Get(ctx, key)
		if err == nil && info.Size > s.cfg.MaxObjectBytes {
			rc.Close()
			return part{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, info.Size)
		}
		if err == nil {
			release, aerr := s.budget.acquire(ctx, info.Size)
			if aerr != nil {
				rc.Close()
				return part{}, aerr
			}
			defer release()
		}
	}
	if err != nil {
		return part{}, err
	}
	defer rc.Close()
	limit := s.cfg.MaxObjectBytes
	if want > 0 {
		limit = want
	}
	var buf bytes.Buffer
	buf.Grow(int(min(max(info.Size, 0), limit)))
	n, err := buf.ReadFrom(io.LimitReader(rc, limit+1))
	if err != nil {
		return part{}, fmt.Errorf("read %s: %w", key, err)
	}
	if n > limit {
		return part{}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	s.m.originBytes.Add(float64(n))
	p := part{data: buf.Bytes(), size: info.Size, contentType: info.ContentType, modTime: info.Modified}
	if want == 0 || p.size <= int64(len(p.data)) {
		p.size = int64(len(p.data))
		p.etag = etagOf(p.data)
		return p, nil
	}
	p.etag = s.recordETag(ctx, id, variant)
	if p.etag == "" {
		p.etag = derivedETag(key, info.Size, info.Modified, info.ETag)
	}
	return p, nil
}

// recordETag returns the ETag of a variant from the SHA-256 its media
// record lists (the same etagOf gives the whole bytes), or "".
func (s *Server) recordETag(ctx context.Context, id media.ID, variant string) string {
	rc, _, err := s.store.Get(ctx, media.RecordKey(id.Key))
	if err != nil {
		return ""
	}
	defer rc.Close()
	var rec struct {
		SHA256   string `json:"sha256"`
		Variants []struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		} `json:"variants"`
	}
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&rec); err != nil {
		return ""
	}
	sum := rec.SHA256
	if variant != media.VariantRaw {
		sum = ""
		for _, v := range rec.Variants {
			if v.Name == variant {
				sum = v.SHA256
			}
		}
	}
	sum = strings.ToLower(sum)
	if len(sum) != 64 {
		return ""
	}
	return `"` + sum[:32] + `"`
}

// readPool reads bytes [off, off+n) of an item from pool 2 of the upload
// front named in its ID; the part's size is the whole item's. It returns
// errPoolGone when the front drained it or is not listed.
func (s *Server) readPool(ctx context.Context, id media.ID, variant string, off, n int64) (part, error) {
	if s.router == nil {
		return part{}, fmt.Errorf("%w: no router", errPoolGone)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	conn, err := s.poolFront(ctx, id)
	if err != nil {
		return part{}, err
	}
	release, err := s.budget.acquire(ctx, n)
	if err != nil {
		return part{}, err
	}
	defer release()
	st, err := willowv1.NewUploadClient(conn).ReadPool(ctx, &willowv1.ReadPoolRequest{MediaId: id.String(), Variant: variant, Offset: off, Length: n})
	var p part
	if err == nil {
		p, err = s.readChunks(st.Recv, n)
	}
	if status.Code(err) == codes.NotFound {
		return part{}, fmt.Errorf("%w: %s", errPoolGone, rpcstatus.Reason(err))
	}
	if err != nil {
		return part{}, err
	}
	s.m.originBytes.Add(float64(len(p.data)))
	sum := strings.ToLower(p.etag) // the front sends the content SHA-256 while the item is in the pool
	switch {
	case off == 0 && int64(len(p.data)) >= p.size:
		p.etag = etagOf(p.data) // the same ETag before and after the drain
	case len(sum) == 64:
		p.etag = `"` + sum[:32] + `"`
	default:
		if p.etag = s.recordETag(ctx, id, variant); p.etag == "" {
			p.etag = derivedETag(storeKey(id, variant), p.size, time.Time{}, "")
		}
	}
	p.modTime = s.now().UTC().Truncate(time.Second)
	return p, nil
}

// poolFront is a connection to the upload front named in a pool-2 ID, or
// errPoolDown when the master does not list it (or cannot be asked).
func (s *Server) poolFront(ctx context.Context, id media.ID) (*grpc.ClientConn, error) {
	rr, err := s.router.Route(ctx, "upload", "")
	if err != nil {
		return nil, fmt.Errorf("%w: route: %w", errPoolDown, err)
	}
	for _, ep := range append(rr.GetPrimary(), rr.GetSecondary()...) {
		if ep.GetNodeId() == id.Node {
			conn, err := s.router.Conn(ep.GetAddr())
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", errPoolDown, id.Node, err)
			}
			return conn, nil
		}
	}
	return nil, fmt.Errorf("%w: front %s not listed", errPoolDown, id.Node)
}

// derivedETag is the ETag of a sliced object whose content hash is not
// known: a hash of its key, size, time and store ETag.
func derivedETag(key string, size int64, mod time.Time, storeETag string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d\x00%s", key, size, mod.UnixNano(), storeETag)))
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}
