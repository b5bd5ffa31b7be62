package edgecache

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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
		who.business = DefaultBusiness
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
	o, tier, err := s.lookup(ctx, req.GetMediaId(), req.GetVariant(), peer, who)
	if err != nil {
		return grpcError(err)
	}
	size := int64(len(o.data))
	off, n := req.GetOffset(), req.GetLength()
	if off < 0 || off > size || n < 0 {
		return grpcError(fmt.Errorf("%w: offset %d length %d of %d bytes", ErrRange, off, n, size))
	}
	if n == 0 || off+n > size {
		n = size - off
	}
	s.m.hit(tier)
	body := o.data[off : off+n]
	msg := &willowv1.DataChunk{Size: size, ContentType: o.contentType, Etag: o.etag}
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

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// grpcError is the one place errors become gRPC statuses.
func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrBadRequest):
		return rpcstatus.New(codes.InvalidArgument, "bad_id", "%v", err)
	case errors.Is(err, ErrProcessing):
		return rpcstatus.New(codes.NotFound, "processing", "%v", err)
	case errors.Is(err, ErrNotFound):
		return rpcstatus.New(codes.NotFound, "not_found", "%v", err)
	case errors.Is(err, ErrForbidden):
		return rpcstatus.New(codes.PermissionDenied, forbiddenReason(err), "%v", err)
	case errors.Is(err, ErrShed):
		return rpcstatus.Overload("shed_ratio", DefaultRetryAfter, "%v", err)
	case errors.Is(err, ErrOverload):
		return rpcstatus.Overload("overload", DefaultRetryAfter, "%v", err)
	case errors.Is(err, ErrRange):
		return rpcstatus.New(codes.OutOfRange, "range", "%v", err)
	case errors.Is(err, ErrTooLarge):
		return rpcstatus.New(codes.FailedPrecondition, "too_large", "%v", err)
	case errors.Is(err, ErrOrigin):
		return rpcstatus.New(codes.Unavailable, "origin", "%v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return rpcstatus.New(codes.Internal, "internal", "%v", err)
}
