package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"willow/buffer"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/store"
)

// GetMedia implements willowv1.UploadServer.
func (s *Server) GetMedia(ctx context.Context, req *willowv1.GetMediaRequest) (*willowv1.Media, error) {
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return nil, fail(ReasonBadMediaID, "%v", err)
	}
	rec, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return ownerView(ctx, rec.mediaProto()), nil
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
			return Record{}, fail(media.ReasonProcessing, "media %s is buffered and not downloadable yet", id)
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
		return Record{}, fail(ReasonStoreUnavailable, "store: %v", err)
	}
	if !mine && (id.Loc == media.LocPool1 || id.Loc == media.LocPool2) {
		// The bytes exist, in a pool of the front the ID names, until it
		// drains them to the store: that front is the one to ask.
		pool := "pool 2"
		if id.Loc == media.LocPool1 {
			pool = "pool 1"
		}
		return Record{}, fail(ReasonHeldByFront, "media %s is in %s of %s and not in the store yet; only that front can read it (it may be down)",
			id, pool, id.Node)
	}
	return Record{}, fail(rpcstatus.ReasonNotFound, "no media %s", id)
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
// (raw or a variant), whole or the byte range offset/length asks for (the
// first chunk's size is the whole item's). Once the item is drained it
// serves it from the store, so readers keep working during and after a
// drain. Pool-1 items give NOT_FOUND "processing" until drained.
func (s *Server) ReadPool(req *willowv1.ReadPoolRequest, stream willowv1.Upload_ReadPoolServer) error {
	ctx := stream.Context()
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return fail(ReasonBadMediaID, "%v", err)
	}
	variant := req.GetVariant()
	if variant == "" {
		variant = media.VariantRaw
	}
	if !media.ValidVariant(variant) {
		return fail(ReasonBadVariant, "unknown variant %q", variant)
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
	off, length := req.GetOffset(), req.GetLength()
	if off < 0 || length < 0 {
		return fail(ReasonBadRange, "offset %d length %d", off, length)
	}
	if rc == nil {
		sctx, cancel := s.storeCtx(ctx)
		defer cancel()
		var r io.ReadCloser
		var info store.Info
		var err error
		if rg, ok := s.st.(store.RangeGetter); ok && (off > 0 || length > 0) {
			n := length
			if n == 0 {
				n = math.MaxInt64 - off
			}
			r, info, err = rg.GetRange(sctx, objKey, off, n)
			off = 0 // the store skipped it
		} else {
			r, info, err = s.st.Get(sctx, objKey)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			if _, lerr := s.lookup(ctx, id); lerr != nil {
				return lerr // not_found or processing
			}
			return fail(media.ReasonProcessing, "variant %s of %s not made yet", variant, id)
		case err != nil:
			return fail(ReasonStoreUnavailable, "store: %v", err)
		}
		rc, size, ctype, etag = r, info.Size, info.ContentType, info.ETag
	}
	defer rc.Close()
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	var body io.Reader = rc
	if off > 0 {
		if _, err := io.CopyN(io.Discard, rc, off); err != nil && !errors.Is(err, io.EOF) {
			return errInternal(err)
		}
	}
	if length > 0 {
		body = io.LimitReader(rc, length)
	}
	buf := make([]byte, readChunk)
	first := true
	for {
		n, rerr := io.ReadFull(body, buf)
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
