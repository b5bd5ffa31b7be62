package edgecache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/flex"
	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
)

// gRPC metadata keys naming the caller (shedding's).
const (
	MetadataBusiness = shedding.MDBusiness
	MetadataUser     = shedding.MDUser
)

// Get streams one variant: the first chunk carries the object's size,
// content type and ETag; offset and length select a byte range (length 0:
// to the end). Errors are gRPC statuses with a reason (see grpcError).
func (s *Server) Get(req *willowv1.GetRequest, stream willowv1.EdgeCache_GetServer) error {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	who := caller{business: first(md.Get(MetadataBusiness)), user: first(md.Get(MetadataUser))}
	if who.business == "" {
		who.business = flex.DefaultBusiness
	}
	peer := req.GetPeer() && s.fromPeer(ctx)
	if !peer {
		sig := signatureOf(req.GetSignature())
		if _, err := s.authorize(ctx, req.GetMediaId(), req.GetVariant(), sig); err != nil {
			return grpcError(err)
		}
		if sig.User != "" {
			who.user = sig.User
		}
	}
	if !peer && !s.cfg.SkipGRPCShedding && s.node.Shedder() == nil {
		if err := s.admit(who.business, who.user); err != nil {
			return grpcError(err)
		}
	}
	id, err := parseReq(req.GetMediaId(), req.GetVariant())
	if err != nil {
		return grpcError(err)
	}
	format := FormatHEIC
	if req.GetFormat() != "" {
		if format, err = pickFormat(req.GetFormat(), nil); err != nil {
			return grpcError(err)
		}
	}
	rq := reqOf(id, req, format, who, peer)
	o, tier, err := s.find(ctx, rq)
	if err != nil {
		return grpcError(err)
	}
	size := o.size
	off, n := req.GetOffset(), req.GetLength()
	if off < 0 || off > size || n < 0 {
		return grpcError(fmt.Errorf("%w: offset %d length %d of %d bytes", ErrRange, off, n, size))
	}
	if n == 0 || off+n > size {
		n = size - off
	}
	s.m.hit(tier)
	if !o.modTime.IsZero() {
		stream.SetHeader(metadata.Pairs(mdLastModified, strconv.FormatInt(o.modTime.UnixMilli(), 10)))
	}
	msg := &willowv1.DataChunk{Size: size, ContentType: o.contentType, Etag: o.etag}
	if !o.sliced {
		body := o.data[off : off+n]
		for {
			k := min(len(body), DefaultChunkBytes)
			msg.Data = body[:k]
			if err := stream.Send(msg); err != nil {
				return err
			}
			s.m.bytesGRPC.Add(float64(k))
			body = body[k:]
			if len(body) == 0 {
				return nil
			}
			msg = &willowv1.DataChunk{}
		}
	}
	rd := s.open(ctx, rq, o, off+n)
	if _, err := rd.Seek(off, io.SeekStart); err != nil {
		return grpcError(err)
	}
	for {
		k := min(n, int64(DefaultChunkBytes))
		buf := make([]byte, k) // not reused: a sent message is not modified
		if _, err := io.ReadFull(rd, buf[:k]); err != nil {
			return grpcError(err)
		}
		msg.Data = buf[:k]
		if err := stream.Send(msg); err != nil {
			return err
		}
		s.m.bytesGRPC.Add(float64(k))
		n -= k
		if n == 0 {
			return nil
		}
		msg = &willowv1.DataChunk{}
	}
}

// reqOf is the request a gRPC Get names; peer is whether an authenticated
// OC peer asks.
func reqOf(id media.ID, g *willowv1.GetRequest, format string, who caller, peer bool) req {
	return req{id: id, idStr: g.GetMediaId(), variant: g.GetVariant(), format: format, fromPeer: peer, who: who}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// grpcError is the one place errors become gRPC statuses.
func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrBadFormat):
		return rpcstatus.New(codes.InvalidArgument, ReasonBadFormat, "%v", err)
	case errors.Is(err, ErrBadRequest):
		return rpcstatus.New(codes.InvalidArgument, ReasonBadID, "%v", err)
	case errors.Is(err, ErrFailed):
		reason := ReasonFailed
		var fe *FailedError
		if errors.As(err, &fe) && fe.Reason != "" {
			reason = fe.Reason
		}
		return rpcstatus.New(codes.FailedPrecondition, reason, "%v", err)
	case errors.Is(err, ErrProcessing):
		return rpcstatus.New(codes.NotFound, media.ReasonProcessing, "%v", err)
	case errors.Is(err, ErrNotFound):
		return rpcstatus.New(codes.NotFound, rpcstatus.ReasonNotFound, "%v", err)
	case errors.Is(err, ErrForbidden):
		return rpcstatus.New(codes.PermissionDenied, forbiddenReason(err), "%v", err)
	case errors.Is(err, ErrShed):
		return rpcstatus.Overload(shedding.ReasonShedRatio, DefaultRetryAfter, "%v", err)
	case errors.Is(err, ErrOverload):
		return rpcstatus.Overload(shedding.ReasonOverload, DefaultRetryAfter, "%v", err)
	case errors.Is(err, ErrRange):
		return rpcstatus.New(codes.OutOfRange, ReasonRange, "%v", err)
	case errors.Is(err, ErrTooLarge):
		return rpcstatus.New(codes.FailedPrecondition, limits.ReasonTooLarge, "%v", err)
	case errors.Is(err, ErrOrigin):
		return rpcstatus.New(codes.Unavailable, ReasonOrigin, "%v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return rpcstatus.New(codes.Internal, rpcstatus.ReasonInternal, "%v", err)
}
