package shedding

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"
)

// Gate runs admission for a request that arrives by a transport other than
// gRPC (the upload front's tus and IETF resumable-upload HTTP endpoints),
// exactly as the server interceptors would for method with that business
// and user: Exempt methods pass; a Deferred method always passes and its
// handler learns the decision from WouldShed on the returned context;
// others are rejected with the same RESOURCE_EXHAUSTED errors (reason
// shed_ratio or overload, with a retry-after hint). release, when not nil,
// frees the concurrency slot and must be called when the request ends.
func (s *Shedder) Gate(ctx context.Context, method, business, user string) (_ context.Context, release func(), err error) {
	cl := s.Class(method)
	if cl == Exempt {
		return ctx, nil, nil
	}
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(MDBusiness, business, MDUser, user))
	return s.gate(ctx, cl, nil, time.Time{})
}
