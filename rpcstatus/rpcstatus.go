// Package rpcstatus builds and reads Willow's gRPC errors: a status code plus
// a machine-readable reason (an errdetails.ErrorInfo in domain "willow") and,
// for overload, a retry-after hint (errdetails.RetryInfo). Servers build
// errors with New at their edge; clients and the CLI read them with Reason
// and RetryAfter.
package rpcstatus

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Domain is the ErrorInfo domain of Willow's reasons.
const Domain = "willow"

// New returns a gRPC status error with code, reason and message.
func New(code codes.Code, reason, format string, args ...any) error {
	st := status.New(code, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain}); err == nil {
		st = d
	}
	return st.Err()
}

// Overload returns a RESOURCE_EXHAUSTED error with reason and a retry-after
// hint.
func Overload(reason string, retryAfter time.Duration, format string, args ...any) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf(format, args...))
	var d *status.Status
	var err error
	if retryAfter > 0 {
		d, err = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	} else {
		d, err = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain})
	}
	if err == nil {
		st = d
	}
	return st.Err()
}

// Reason returns the Willow reason carried by err, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// RetryAfter returns the retry-after hint carried by err, or 0.
func RetryAfter(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// Line formats err as the CLI's one-line reason: "CODE reason: message".
func Line(err error) string {
	if err == nil {
		return ""
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return err.Error()
	}
	st := se.GRPCStatus()
	code := st.Code().String()
	if name, ok := codeNames[st.Code()]; ok {
		code = name
	}
	if r := Reason(err); r != "" {
		return fmt.Sprintf("%s %s: %s", code, r, st.Message())
	}
	return fmt.Sprintf("%s: %s", code, st.Message())
}

var codeNames = map[codes.Code]string{
	codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}
