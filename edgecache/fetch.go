package edgecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/store"
)

// errPoolGone says pool 2 no longer holds an item (drained, or the front
// is gone): read the store instead. It is not a failure.
var errPoolGone = errors.New("not in pool 2")

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

// lookup returns the object for idStr/variant and the tier it came from.
// fromPeer is set when another node of the OC asks as the owner: the
// request is then never forwarded.
func (s *Server) lookup(ctx context.Context, idStr, variant string, fromPeer bool, who caller) (*object, string, error) {
	id, err := parseReq(idStr, variant)
	if err != nil {
		return nil, "", err
	}
	key := idStr + "/" + variant
	if o, ok := s.mem.get(key); ok {
		return o, tierMemory, nil
	}
	if o, ok := s.hot.get(key); ok {
		return o, tierMemory, nil
	}
	if s.disk != nil {
		if o, ok := s.disk.get(key); ok {
			s.mem.add(key, o)
			return o, tierDisk, nil
		}
	}
	ch := s.group.DoChan(key, func() (any, error) {
		// The fill outlives a caller that gives up; it has its own deadlines.
		return s.fill(context.WithoutCancel(ctx), id, key, variant, fromPeer, who)
	})
	select {
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, "", r.Err
		}
		f := r.Val.(found)
		return f.o, f.tier, nil
	}
}

// fill fetches a missed object from the owner peer or origin and caches it.
func (s *Server) fill(ctx context.Context, id media.ID, key, variant string, fromPeer bool, who caller) (found, error) {
	if o, ok := s.mem.get(key); ok {
		return found{o, tierMemory}, nil
	}
	owner := s.ring.Load().Get(key)
	if !fromPeer && owner != s.self {
		if !s.peerDown(owner) {
			addr := (*s.peers.Load())[owner]
			o, err := s.fetchPeer(shedding.WithRequest(ctx, who.business, who.user), addr, id, variant)
			switch {
			case err == nil:
				s.hot.add(key, o)
				return found{o, tierPeer}, nil
			case errors.Is(err, ErrNotFound), errors.Is(err, ErrBadRequest), errors.Is(err, ErrTooLarge):
				return found{}, err
			}
			s.log.Warn("owner peer failed, reading origin", "owner", owner, "key", key, "err", err)
			s.markDown(owner)
		}
		o, err := s.fetchOrigin(ctx, id, variant)
		if err != nil {
			return found{}, err
		}
		s.hot.add(key, o)
		return found{o, tierOrigin}, nil
	}
	o, err := s.fetchOrigin(ctx, id, variant)
	if err != nil {
		return found{}, err
	}
	s.mem.add(key, o)
	if s.disk != nil {
		if err := s.disk.add(key, o); err != nil {
			s.log.Warn("disk tier", "err", err)
		}
	}
	return found{o, tierOrigin}, nil
}

// fetchPeer reads the whole object from the owner peer at addr. Its
// NOT_FOUND and INVALID_ARGUMENT answers map to ErrNotFound and
// ErrBadRequest; any other error means the peer failed.
func (s *Server) fetchPeer(ctx context.Context, addr string, id media.ID, variant string) (*object, error) {
	if addr == "" {
		return nil, errors.New("owner has no address")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	conn, err := s.conn(addr)
	if err != nil {
		return nil, err
	}
	st, err := willowv1.NewEdgeCacheClient(conn).Get(ctx, &willowv1.GetRequest{MediaId: id.String(), Variant: variant, Peer: true})
	if err != nil {
		return nil, fromGRPC(err)
	}
	o, err := s.readChunks(st.Recv)
	if err != nil {
		return nil, fromGRPC(err)
	}
	return o, nil
}

// fromGRPC maps a gRPC error of a peer or front back to this package's
// sentinels where one fits.
func fromGRPC(err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		if rpcstatus.Reason(err) == "processing" {
			return fmt.Errorf("%w (%s)", ErrProcessing, status.Convert(err).Message())
		}
		return fmt.Errorf("%w (%s)", ErrNotFound, status.Convert(err).Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w (%s)", ErrBadRequest, status.Convert(err).Message())
	case codes.FailedPrecondition:
		if rpcstatus.Reason(err) == "too_large" {
			return fmt.Errorf("%w (%s)", ErrTooLarge, status.Convert(err).Message())
		}
	}
	return err
}

// readChunks collects a DataChunk stream into an object.
func (s *Server) readChunks(recv func() (*willowv1.DataChunk, error)) (*object, error) {
	var buf bytes.Buffer
	var o object
	first := true
	for {
		c, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if first {
			first = false
			if c.GetSize() > s.cfg.MaxObjectBytes {
				return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, c.GetSize())
			}
			buf.Grow(int(c.GetSize()))
			o.contentType, o.etag = c.GetContentType(), c.GetEtag()
		}
		if int64(buf.Len()+len(c.GetData())) > s.cfg.MaxObjectBytes {
			return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, s.cfg.MaxObjectBytes)
		}
		buf.Write(c.GetData())
	}
	o.data = buf.Bytes()
	o.size = int64(len(o.data))
	if o.etag == "" {
		o.etag = etagOf(o.data)
	}
	o.contentType = contentType(o.contentType, o.data)
	return &o, nil
}

// fetchOrigin reads an object from origin as its media ID says. A failed
// read is retried at most twice, on the other source (pool 2 -> store) or
// the store again, and only while the retries knob is on.
func (s *Server) fetchOrigin(ctx context.Context, id media.ID, variant string) (*object, error) {
	tries := 1
	if s.node.Knobs().Retries {
		tries = 3
	}
	if id.Loc == media.LocPool2 {
		o, err := s.readPool(ctx, id, variant)
		switch {
		case err == nil:
			s.m.originFetches.WithLabelValues("pool2", "ok").Inc()
			return o, nil
		case errors.Is(err, errPoolGone):
			s.m.originFetches.WithLabelValues("pool2", "not_found").Inc()
		case errors.Is(err, ErrTooLarge):
			return nil, err
		default:
			s.m.originFetches.WithLabelValues("pool2", "error").Inc()
			tries--
			if tries == 0 {
				return nil, fmt.Errorf("%w: pool 2 of %s: %w", ErrOrigin, id.Node, err)
			}
			s.log.Warn("pool 2 read failed, retrying on the store", "id", id, "err", err)
		}
	}
	var last error
	for range tries {
		o, err := s.readStore(ctx, id, variant)
		switch {
		case err == nil:
			s.m.originFetches.WithLabelValues("store", "ok").Inc()
			return o, nil
		case errors.Is(err, store.ErrNotFound):
			s.m.originFetches.WithLabelValues("store", "not_found").Inc()
			if id.Loc == media.LocPool1 {
				return nil, fmt.Errorf("%w: %s/%s", ErrProcessing, id, variant)
			}
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, id, variant)
		case errors.Is(err, ErrTooLarge):
			return nil, err
		}
		s.m.originFetches.WithLabelValues("store", "error").Inc()
		last = err
	}
	return nil, fmt.Errorf("%w: store: %w", ErrOrigin, last)
}

// storeKey is the store key of one variant.
func storeKey(id media.ID, variant string) string {
	if variant == media.VariantRaw {
		return media.RawKey(id.Key)
	}
	return media.VariantKey(id.Key, variant)
}

func (s *Server) readStore(ctx context.Context, id media.ID, variant string) (*object, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	rc, info, err := s.store.Get(ctx, storeKey(id, variant))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if info.Size > s.cfg.MaxObjectBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, info.Size)
	}
	var buf bytes.Buffer
	if info.Size > 0 {
		buf.Grow(int(info.Size))
	}
	n, err := buf.ReadFrom(io.LimitReader(rc, s.cfg.MaxObjectBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", info.Key, err)
	}
	if n > s.cfg.MaxObjectBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, s.cfg.MaxObjectBytes)
	}
	o := &object{data: buf.Bytes(), size: int64(buf.Len()), contentType: contentType(info.ContentType, buf.Bytes())}
	o.etag = etagOf(o.data)
	return o, nil
}

// readPool reads an item from pool 2 of the upload front named in its ID.
// It returns errPoolGone when the front drained it or is not listed.
func (s *Server) readPool(ctx context.Context, id media.ID, variant string) (*object, error) {
	if s.router == nil {
		return nil, fmt.Errorf("%w: no router", errPoolGone)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	rr, err := s.router.Route(ctx, "upload", "")
	if err != nil {
		return nil, fmt.Errorf("%w: route: %w", errPoolGone, err)
	}
	addr := ""
	for _, ep := range append(rr.GetPrimary(), rr.GetSecondary()...) {
		if ep.GetNodeId() == id.Node {
			addr = ep.GetAddr()
			break
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: front %s not listed", errPoolGone, id.Node)
	}
	conn, err := s.router.Conn(addr)
	if err != nil {
		return nil, err
	}
	st, err := willowv1.NewUploadClient(conn).ReadPool(ctx, &willowv1.ReadPoolRequest{MediaId: id.String(), Variant: variant})
	if err == nil {
		var o *object
		if o, err = s.readChunks(st.Recv); err == nil {
			o.etag = etagOf(o.data) // the same ETag before and after the drain
			return o, nil
		}
	}
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: %s", errPoolGone, rpcstatus.Reason(err))
	}
	return nil, err
}
