package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	willowv1 "willow/proto/willow/v1"
)

// The node's gRPC server runs every call through one interceptor (unary
// and stream), which does in one frame what a chain of six did: count it
// in the gRPC Prometheus series (rpcmetrics.go), authorize it (the guard),
// count it for heartbeats (stats), apply drills, admit it (shedding), run
// Config.Unary/Stream, recover a handler's panic, and log it. The order is
// the chain's: metrics and logging see every call, refused ones too; the
// guard runs before anything counts the call for heartbeats; drills and
// shedding run inside stats; recovery is innermost. Per call it resolves
// nothing by name it can resolve up front (each method's series are made
// when the node starts) and builds the log line only when the logger
// would write it: the level is decided by the call's code after the call.

// callLevel is the level a finished call of code is logged at: client
// mistakes and successes at debug, server faults at error, the rest warn.
func callLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.NotFound, codes.Canceled, codes.AlreadyExists, codes.ResourceExhausted, codes.InvalidArgument:
		return slog.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	}
	return slog.LevelWarn
}

// unaryInterceptor is the node's unary server interceptor.
func (n *Node) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	s := n.rpc.of(info.FullMethod, typeUnary)
	s.started.Inc()
	s.received.Inc()
	resp, err := n.serveUnary(ctx, req, info, h, start)
	if err == nil {
		s.sent.Inc()
	}
	n.finished(ctx, s, start, err)
	return resp, err
}

func (n *Node) serveUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler, start time.Time) (any, error) {
	ctx, err := n.guard.Authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if isHealthCheck(info.FullMethod) {
		return n.admitUnary(ctx, req, info, h, start)
	}
	n.stats.inFlight.Add(1)
	resp, err := n.admitUnary(ctx, req, info, h, start)
	n.stats.inFlight.Add(-1)
	n.stats.done(time.Since(start), err)
	return resp, err
}

// admitUnary applies drills and admission (at start, the call's clock
// read), then runs the handler.
func (n *Node) admitUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler, start time.Time) (any, error) {
	if err := n.drillFault(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	ctx, release, err := n.shedder.GateCallAt(ctx, info.FullMethod, nil, start)
	if err != nil {
		return nil, err
	}
	var resp any
	if n.unaryExtra != nil {
		resp, err = n.unaryExtra(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return n.invokeUnary(ctx, req, h)
		})
	} else {
		resp, err = n.invokeUnary(ctx, req, h)
	}
	if release != nil {
		release()
	}
	return resp, err
}

// invokeUnary runs the handler, turning a panic into INTERNAL.
func (n *Node) invokeUnary(ctx context.Context, req any, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = n.recovered(ctx, p)
		}
	}()
	return h(ctx, req)
}

// streamInterceptor is the node's stream server interceptor.
func (n *Node) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	typ := typeBidiStream // as the provider types a stream
	switch {
	case info.IsClientStream && !info.IsServerStream:
		typ = typeClientStream
	case !info.IsClientStream && info.IsServerStream:
		typ = typeServerStream
	}
	s := n.rpc.of(info.FullMethod, typ)
	s.started.Inc()
	ctx := ss.Context()
	w := &serverStream{ServerStream: ss, ctx: ctx, series: s}
	err := n.serveStream(srv, w, info, h, start)
	n.finished(ctx, s, start, err)
	return err
}

func (n *Node) serveStream(srv any, w *serverStream, info *grpc.StreamServerInfo, h grpc.StreamHandler, start time.Time) error {
	ctx, err := n.guard.Authorize(w.ctx, info.FullMethod)
	if err != nil {
		return err
	}
	w.ctx = ctx
	if isHealthCheck(info.FullMethod) || info.FullMethod == willowv1.Master_Watch_FullMethodName {
		return n.admitStream(srv, w, info, h, start)
	}
	n.stats.inFlight.Add(1)
	err = n.admitStream(srv, w, info, h, start)
	n.stats.inFlight.Add(-1)
	n.stats.done(time.Since(start), err)
	return err
}

func (n *Node) admitStream(srv any, w *serverStream, info *grpc.StreamServerInfo, h grpc.StreamHandler, start time.Time) error {
	if err := n.drillFault(w.ctx, info.FullMethod); err != nil {
		return err
	}
	ctx, release, err := n.shedder.GateCallAt(w.ctx, info.FullMethod, w, start)
	if err != nil {
		return err
	}
	w.ctx = ctx
	if n.streamExtra != nil {
		err = n.streamExtra(srv, w, info, func(srv any, ss grpc.ServerStream) error {
			return n.invokeStream(srv, ss, h)
		})
	} else {
		err = n.invokeStream(srv, w, h)
	}
	if release != nil {
		release()
	}
	return err
}

// invokeStream runs the handler, turning a panic into INTERNAL.
func (n *Node) invokeStream(srv any, ss grpc.ServerStream, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = n.recovered(ss.Context(), p)
		}
	}()
	return h(srv, ss)
}

func (n *Node) recovered(ctx context.Context, p any) error {
	n.log.ErrorContext(ctx, "panic in handler", "panic", fmt.Sprint(p))
	return status.Errorf(codes.Internal, "internal error")
}

// finished counts a call that ended with err and logs it when the logger
// takes its code's level. Message and fields are those of
// go-grpc-middleware's logging interceptor (FinishCall), which the node ran
// before: that interceptor built them on every call, logged or not.
func (n *Node) finished(ctx context.Context, s *rpcSeries, start time.Time, err error) {
	took := time.Since(start)
	st, isStatus := status.FromError(err) // (nil, true) for nil
	code := st.Code()
	if !isStatus { // a bare context error counts as grpc sends it
		code = status.FromContextError(err).Code()
	}
	n.rpc.done(s, code, took.Seconds())

	logCode := st.Code()
	if errors.Is(err, io.EOF) {
		logCode, err = codes.OK, nil
	}
	lvl := callLevel(logCode)
	if !n.log.Enabled(ctx, lvl) {
		return
	}
	fields := make([]any, 0, 22)
	fields = append(fields, logging.SystemTag[0], logging.SystemTag[1], logging.ComponentFieldKey, logging.KindServerFieldValue,
		logging.ServiceFieldKey, s.service, logging.MethodFieldKey, s.method, logging.MethodTypeFieldKey, s.typ)
	if p, ok := peer.FromContext(ctx); ok {
		fields = append(fields, "peer.address", p.Addr.String())
	}
	fields = append(fields, "grpc.start_time", start.Format(time.RFC3339))
	if d, ok := ctx.Deadline(); ok {
		fields = append(fields, "grpc.request.deadline", d.Format(time.RFC3339))
	}
	fields = append(fields, "grpc.code", logCode.String())
	if err != nil {
		fields = append(fields, "grpc.error", fmt.Sprintf("%v", err))
	}
	fields = append(fields, "grpc.time_ms", fmt.Sprintf("%v", float32(took.Nanoseconds()/1000)/1000))
	n.log.Log(ctx, lvl, "finished call", fields...)
}

// serverStream is the stream a handler sees: the context carries what the
// guard and shedding added, and every message is counted.
type serverStream struct {
	grpc.ServerStream
	ctx    context.Context
	series *rpcSeries
}

func (w *serverStream) Context() context.Context { return w.ctx }

func (w *serverStream) SendMsg(m any) error {
	err := w.ServerStream.SendMsg(m)
	if err == nil {
		w.series.sent.Inc()
	}
	return err
}

func (w *serverStream) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if err == nil {
		w.series.received.Inc()
	}
	return err
}

// chainUnary folds Config.Unary into one interceptor (nil for none), the
// first outermost, as grpc.ChainUnaryInterceptor does.
func chainUnary(ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(ics) == 0 {
		return nil
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		var next func(i int) grpc.UnaryHandler
		next = func(i int) grpc.UnaryHandler {
			if i == len(ics) {
				return h
			}
			return func(ctx context.Context, req any) (any, error) { return ics[i](ctx, req, info, next(i+1)) }
		}
		return next(0)(ctx, req)
	}
}

// chainStream is chainUnary for Config.Stream.
func chainStream(ics []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	if len(ics) == 0 {
		return nil
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		var next func(i int) grpc.StreamHandler
		next = func(i int) grpc.StreamHandler {
			if i == len(ics) {
				return h
			}
			return func(srv any, ss grpc.ServerStream) error { return ics[i](srv, ss, info, next(i+1)) }
		}
		return next(0)(srv, ss)
	}
}
