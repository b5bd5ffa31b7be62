package shedding

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata keys of the request context and the admission level.
const (
	MDBusiness       = "willow-business"
	MDUser           = "willow-user"
	HeaderAdmitLevel = "willow-admit-level"
)

type wouldShedKey struct{}

// WouldShed reports, inside the handler of a Deferred method, what
// admission decided: the reason and true when it would have rejected the
// request. Outside a Deferred method it reports ("", false).
func WouldShed(ctx context.Context) (reason string, shed bool) {
	r, _ := ctx.Value(wouldShedKey{}).(string)
	return r, r != ""
}

// requestContext reads business and user from incoming metadata (the last
// value of each wins).
func requestContext(ctx context.Context) (business, user string) {
	return lastOf(metadata.ValueFromIncomingContext(ctx, MDBusiness)),
		lastOf(metadata.ValueFromIncomingContext(ctx, MDUser))
}

func lastOf(v []string) string {
	if len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// gate runs admission for one call of a method of class cl (not Exempt).
// It returns the context for the handler
// (carrying WouldShed for Deferred methods), a release func for the slot
// (nil when none was taken) and the rejection error, if any.
// ss is the server stream, nil for unary calls.
// now is the call's start as GateCallAt's caller read it, zero for none.
func (s *Shedder) gate(ctx context.Context, cl Class, ss grpc.ServerStream, now time.Time) (context.Context, func(), error) {
	deferred := cl == Deferred
	business, user := requestContext(ctx)
	if now.IsZero() || s.clock == nil {
		now = s.now()
	}
	reason, ok, bi, key := s.admit(business, user, now)
	if !deferred {
		s.announce(ctx, ss)
	}
	if !ok {
		if deferred {
			s.metrics.deferredShed(bi, reason)
			return context.WithValue(ctx, wouldShedKey{}, reason), nil, nil
		}
		s.metrics.rejected(bi, reason)
		if reason == ReasonShedRatio {
			return ctx, nil, s.errShed
		}
		return ctx, nil, s.errOver
	}
	fast, err := s.acquire(ctx, bi, key)
	if err != nil {
		if ctx.Err() != nil {
			return ctx, nil, status.FromContextError(ctx.Err()).Err()
		}
		if deferred {
			s.metrics.deferredShed(bi, ReasonOverload)
			return context.WithValue(ctx, wouldShedKey{}, ReasonOverload), nil, nil
		}
		s.metrics.rejected(bi, ReasonOverload)
		return ctx, nil, s.errOver
	}
	if fast {
		s.biz[bi].fast.Add(1)
	} else {
		s.metrics.admit(bi)
	}
	return ctx, s.release, nil
}

// announce sends the admission level in the response header while the
// level is below the top, and for DefaultLevelTTL after it returns there,
// so that every client that learned a lower level hears the top again
// before it would stop trusting that level. A node that has admitted
// everything for longer sends nothing: setting a header is most of the
// interceptor's cost, and a client that hears no level drops nothing.
func (s *Shedder) announce(ctx context.Context, ss grpc.ServerStream) {
	lvl := s.level.Load()
	if lvl == s.maxLevel {
		until := s.announceUntil.Load()
		if until == 0 {
			return
		}
		if s.now().UnixNano() >= until {
			s.announceUntil.CompareAndSwap(until, 0)
			return
		}
	}
	md := s.levelMD[lvl] // shared: grpc copies header metadata
	if ss != nil {
		_ = ss.SetHeader(md)
	} else {
		_ = grpc.SetHeader(ctx, md)
	}
}

// GateCall is the server interceptors' admission for one call of method, for
// a server that runs it inside an interceptor of its own (package node
// does): Exempt methods pass untouched; others are shed by ratio, by
// level or after MaxWait for a slot (RESOURCE_EXHAUSTED, reason shed_ratio
// or overload, with a retry-after hint), except Deferred methods, whose
// handler always runs and learns the decision from WouldShed. The
// admission level goes back in the response header willow-admit-level (on
// ss for streams; ss is nil for unary calls). It returns the context for
// the handler, the func that releases the call's slot when the call ends
// (nil when none was taken) and the rejection error. A nil Shedder admits
// everything.
func (s *Shedder) GateCall(ctx context.Context, method string, ss grpc.ServerStream) (context.Context, func(), error) {
	if s == nil {
		return ctx, nil, nil
	}
	cl := s.Class(method)
	if cl == Exempt {
		return ctx, nil, nil
	}
	return s.gate(ctx, cl, ss, time.Time{})
}

// GateCallAt is GateCall for a caller that read the clock at the call's
// start already (package node times every call): now, that time.Now,
// stands in for the shedder's own clock read. A Shedder whose clock is
// Deps.Now reads that clock instead.
func (s *Shedder) GateCallAt(ctx context.Context, method string, ss grpc.ServerStream, now time.Time) (context.Context, func(), error) {
	if s == nil {
		return ctx, nil, nil
	}
	cl := s.Class(method)
	if cl == Exempt {
		return ctx, nil, nil
	}
	return s.gate(ctx, cl, ss, now)
}

// UnaryServerInterceptor applies admission (GateCall) to unary calls.
func (s *Shedder) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, release, err := s.GateCall(ctx, info.FullMethod, nil)
		if err != nil {
			return nil, err
		}
		if release != nil {
			defer release()
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: admission
// is decided when the stream opens and a slot is held until it ends.
func (s *Shedder) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, release, err := s.GateCall(ss.Context(), info.FullMethod, ss)
		if err != nil {
			return err
		}
		if release != nil {
			defer release()
		}
		if ctx != ss.Context() {
			ss = &ctxStream{ServerStream: ss, ctx: ctx}
		}
		return handler(srv, ss)
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
