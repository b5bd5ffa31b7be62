package compress

// Reasons of compress's errors (Server.status is the one place they are
// sent), besides limits.ReasonPixelBomb, ReasonTooLarge and ReasonTooLong
// (INVALID_ARGUMENT), shedding.ReasonOverload (RESOURCE_EXHAUSTED with a
// retry-after) and rpcstatus.ReasonBadRequest, ReasonCanceled and
// ReasonInternal.
const (
	// ReasonUnsupportedMedia: the bytes are no format compress makes
	// variants of (INVALID_ARGUMENT).
	ReasonUnsupportedMedia = "unsupported_media"
	// ReasonCorruptMedia: the bytes do not decode (INVALID_ARGUMENT).
	ReasonCorruptMedia = "corrupt_media"
	// ReasonSourceMissing: the raw object is not in the store (NOT_FOUND).
	ReasonSourceMissing = "source_missing"
	// ReasonVerifyFailed: a variant made does not decode back (INTERNAL).
	ReasonVerifyFailed = "verify_failed"
)
