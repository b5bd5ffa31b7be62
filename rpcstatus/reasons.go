package rpcstatus

// Reasons any service may send, for conditions that belong to no one
// package. A service's own reasons live in its reasons.go.
const (
	// ReasonInternal: a bug or an unexpected failure (INTERNAL).
	ReasonInternal = "internal"
	// ReasonCanceled: the caller went away (CANCELLED).
	ReasonCanceled = "canceled"
	// ReasonDeadline: the call's deadline passed (DEADLINE_EXCEEDED).
	ReasonDeadline = "deadline"
	// ReasonNotFound: no such thing: media item, variant, path or node
	// (NOT_FOUND, HTTP 404).
	ReasonNotFound = "not_found"
	// ReasonBadRequest: a malformed request no more specific reason
	// names (INVALID_ARGUMENT).
	ReasonBadRequest = "bad_request"
)
