package edgecache

// Reasons of the edge's errors: the gRPC ErrorInfo reason (grpcError) and
// the HTTP JSON body's "reason" (writeError), the two places errors leave
// the edge. The edge also sends media.ReasonProcessing and rpcstatus.ReasonNotFound
// (NOT_FOUND / 404), limits.ReasonTooLarge (FAILED_PRECONDITION / 502),
// shedding.ReasonShedRatio and ReasonOverload (RESOURCE_EXHAUSTED / 429),
// rpcstatus.ReasonInternal and ReasonCanceled (HTTP 499); a failed item
// carries the reason it failed with (e.g. limits.ReasonPixelBomb).
const (
	// ReasonBadFormat: an unknown or unservable format (INVALID_ARGUMENT / 400).
	ReasonBadFormat = "bad_format"
	// ReasonBadID: a malformed media ID or variant (INVALID_ARGUMENT / 400).
	ReasonBadID = "bad_id"
	// ReasonFailed: the item failed and names no reason of its own
	// (FAILED_PRECONDITION / 422).
	ReasonFailed = "failed"
	// ReasonRange: a byte range outside the variant (OUT_OF_RANGE).
	ReasonRange = "range"
	// ReasonOrigin: the origin (a pool, the store, a peer) failed or timed
	// out (UNAVAILABLE / 503).
	ReasonOrigin = "origin"
)

// Reason codes of a refused download (PERMISSION_DENIED / 403).
const (
	ReasonSignatureMissing    = "signature_missing"
	ReasonSignatureExpired    = "signature_expired"
	ReasonSignatureInvalid    = "signature_invalid"
	ReasonSignatureUnknownKey = "signature_unknown_key"
)
