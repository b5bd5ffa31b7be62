package upload

import (
	"google.golang.org/grpc/codes"

	"willow/auth"
	"willow/flex"
	"willow/limits"
	"willow/media"
	"willow/rpcstatus"
)

// Reasons of a refused request: a malformed or inconsistent field or body
// (INVALID_ARGUMENT). The limits' reasons (limits.ReasonTooLarge,
// ReasonTooLong, ReasonPixelBomb) and flex.ReasonUnknownBusiness are sent
// as well.
const (
	ReasonBadUploadID        = "bad_upload_id"       // an upload ID not 1-128 of [A-Za-z0-9._:-]
	ReasonAmbiguousUploadID  = "ambiguous_upload_id" // a Chunk without user for an ID several users use
	ReasonBadUser            = "bad_user"            // user missing or too long
	ReasonBadKind            = "bad_kind"            // kind neither image nor video
	ReasonBadSize            = "bad_size"            // size not positive
	ReasonBadSHA256          = "bad_sha256"          // sha256 not 64 hex digits
	ReasonUploadConflict     = "upload_conflict"     // an upload ID begun again with another size, kind or sha256
	ReasonChunkOutOfOrder    = "chunk_out_of_order"
	ReasonChunkOutOfRange    = "chunk_out_of_range" // bytes past the upload's size
	ReasonChunkMismatch      = "chunk_mismatch"     // a resent range with other bytes
	ReasonChunkTooLarge      = "chunk_too_large"
	ReasonSizeMismatch       = "size_mismatch"   // Commit before all bytes arrived
	ReasonSHA256Mismatch     = "sha256_mismatch" // the bytes received are not the declared sha256
	ReasonBodyIncomplete     = "body_incomplete" // a checksummed HTTP body broke off
	ReasonChecksumMismatch   = "checksum_mismatch"
	ReasonFieldTooLong       = "field_too_long" // a string field over its length limit
	ReasonBadMediaID         = "bad_media_id"
	ReasonBadVariant         = "bad_variant"
	ReasonBadRange           = "bad_range"
	ReasonBadPool            = "bad_pool"
	ReasonBadMetadata        = "bad_metadata" // tus Upload-Metadata
	ReasonBadOffset          = "bad_offset"   // Upload-Offset missing or malformed
	ReasonBadUploadComplete  = "bad_upload_complete"
	ReasonBadContentType     = "bad_content_type"
	ReasonLengthRequired     = "length_required"
	ReasonConcatUnsupported  = "concat_unsupported"
	ReasonUnsupportedInterop = "unsupported_interop_version"
	// ReasonUnsupportedFormat: the bytes of an upload are not one of the
	// accepted media formats (an HTML page posing as a photo, a PDF, a
	// script), or not of the declared kind. The client's content type
	// plays no part.
	ReasonUnsupportedFormat = "unsupported_format"
)

// Reasons of a missing upload (NOT_FOUND). An unknown media item is
// rpcstatus.ReasonNotFound, one not made yet media.ReasonProcessing.
const (
	// ReasonUnknownUpload: no upload of this ID for this user.
	ReasonUnknownUpload = "unknown_upload"
	// ReasonUploadExpired: the upload was not committed within
	// Config.StagingTTL; its staged bytes are (being) removed (HTTP 410).
	ReasonUploadExpired = "upload_expired"
)

// Reasons of a call the state forbids (FAILED_PRECONDITION).
const (
	// ReasonAlreadyCommitted: a write to or delete of a committed upload.
	ReasonAlreadyCommitted = "already_committed"
	// ReasonPoolDisabled: a drain of a pool this front does not have.
	ReasonPoolDisabled = "pool_disabled"
	// ReasonNotFailed: RetryMedia of a media item that is not failed.
	ReasonNotFailed = "not_failed"
	// ReasonWrongFront: RetryMedia of a pool-2 item on another front than
	// the one holding its bytes.
	ReasonWrongFront = "wrong_front"
	// ReasonUploadMoved: another front of the region took the upload over
	// (the client resumed there, resume.go); this front no longer accepts
	// its bytes or its Commit.
	ReasonUploadMoved = "upload_moved"
)

// Reasons of a front that cannot serve now (UNAVAILABLE; retry, maybe
// elsewhere).
const (
	// ReasonStoreUnavailable: the object store failed or timed out.
	ReasonStoreUnavailable = "store_unavailable"
	// ReasonRetiring: a retiring front refuses a new upload; the client
	// goes to another front.
	ReasonRetiring = "retiring"
	// ReasonUploadBusy: another HTTP request is still writing the upload.
	ReasonUploadBusy = "upload_busy"
	// ReasonDrainFailed: a pool drain stopped on an error.
	ReasonDrainFailed = "drain_failed"
	// ReasonHeldByFront: a read of a media item whose bytes are in a pool
	// of another front (the one its ID names) and not in the store yet:
	// only that front can answer, and it was not reachable to the caller
	// (down, killed, or the call went elsewhere).
	ReasonHeldByFront = "held_by_front"
)

// Reasons of the caller limits and deadlines.
const (
	// ReasonIdleTimeout: a Chunks stream sent nothing for
	// Config.ChunkIdleTimeout (DEADLINE_EXCEEDED).
	ReasonIdleTimeout = "idle_timeout"
	// ReasonDrainDeadline: a pool drain's deadline passed with items left
	// (DEADLINE_EXCEEDED).
	ReasonDrainDeadline = "drain_deadline"
	// ReasonTooManyStreams: the connection or user already has its
	// Config.MaxStreamsPer* Chunks streams open (RESOURCE_EXHAUSTED).
	ReasonTooManyStreams = "too_many_streams"
	// ReasonTooManyUploads: the connection or user already has its
	// Config.MaxStagedPer* uploads begun and not committed
	// (RESOURCE_EXHAUSTED).
	ReasonTooManyUploads = "too_many_uploads"
	// ReasonStagingFull: Begin of a new upload would pass the front's
	// staging byte budget; retry after the hint (RESOURCE_EXHAUSTED,
	// sent with rpcstatus.Overload as shedding's reasons are).
	ReasonStagingFull = "staging_full"
)

// Reasons of a refused upload token (UNAUTHENTICATED), besides
// auth.ReasonTokenExpired.
const (
	ReasonTokenMissing = "token_missing" // no Authorization: Bearer on the HTTP protocols
	ReasonTokenInvalid = "token_invalid" // forged, or for another user or business
)

// ReasonCompressRefused is the failure reason of a media item (Record.Reason)
// when compress refused its job without a reason code of its own.
const ReasonCompressRefused = "compress_refused"

// ReasonRetriesExhausted is the failure reason of a media item whose
// compress job's transient errors outlasted the caps:
// Config.MaxInternalAttempts attempts that compress answered INTERNAL (or
// UNKNOWN, DATA_LOSS), or Config.MaxRetryAge since it was journaled. Sent
// as FAILED_PRECONDITION where a status carries it.
const ReasonRetriesExhausted = "retries_exhausted"

// reasonCodes is the one table from a reason to the gRPC code the upload
// front sends it with; fail reads it. The HTTP status of each is httpStatus's.
var reasonCodes = map[string]codes.Code{
	ReasonBadUploadID:          codes.InvalidArgument,
	ReasonAmbiguousUploadID:    codes.InvalidArgument,
	ReasonBadUser:              codes.InvalidArgument,
	ReasonBadKind:              codes.InvalidArgument,
	ReasonBadSize:              codes.InvalidArgument,
	ReasonBadSHA256:            codes.InvalidArgument,
	ReasonUploadConflict:       codes.InvalidArgument,
	ReasonChunkOutOfOrder:      codes.InvalidArgument,
	ReasonChunkOutOfRange:      codes.InvalidArgument,
	ReasonChunkMismatch:        codes.InvalidArgument,
	ReasonChunkTooLarge:        codes.InvalidArgument,
	ReasonSizeMismatch:         codes.InvalidArgument,
	ReasonSHA256Mismatch:       codes.InvalidArgument,
	ReasonBodyIncomplete:       codes.InvalidArgument,
	ReasonChecksumMismatch:     codes.InvalidArgument,
	ReasonFieldTooLong:         codes.InvalidArgument,
	ReasonBadMediaID:           codes.InvalidArgument,
	ReasonBadVariant:           codes.InvalidArgument,
	ReasonBadRange:             codes.InvalidArgument,
	ReasonBadPool:              codes.InvalidArgument,
	ReasonBadMetadata:          codes.InvalidArgument,
	ReasonBadOffset:            codes.InvalidArgument,
	ReasonBadUploadComplete:    codes.InvalidArgument,
	ReasonBadContentType:       codes.InvalidArgument,
	ReasonLengthRequired:       codes.InvalidArgument,
	ReasonConcatUnsupported:    codes.InvalidArgument,
	ReasonUnsupportedInterop:   codes.InvalidArgument,
	ReasonUnsupportedFormat:    codes.InvalidArgument,
	limits.ReasonTooLarge:      codes.InvalidArgument,
	limits.ReasonTooLong:       codes.InvalidArgument,
	limits.ReasonPixelBomb:     codes.InvalidArgument,
	flex.ReasonUnknownBusiness: codes.InvalidArgument,
	ReasonUnknownUpload:        codes.NotFound,
	ReasonUploadExpired:        codes.NotFound,
	media.ReasonProcessing:     codes.NotFound,
	rpcstatus.ReasonNotFound:   codes.NotFound,
	ReasonAlreadyCommitted:     codes.FailedPrecondition,
	ReasonPoolDisabled:         codes.FailedPrecondition,
	ReasonNotFailed:            codes.FailedPrecondition,
	ReasonWrongFront:           codes.FailedPrecondition,
	ReasonUploadMoved:          codes.FailedPrecondition,
	ReasonRetriesExhausted:     codes.FailedPrecondition,
	ReasonStoreUnavailable:     codes.Unavailable,
	ReasonRetiring:             codes.Unavailable,
	ReasonUploadBusy:           codes.Unavailable,
	ReasonDrainFailed:          codes.Unavailable,
	ReasonHeldByFront:          codes.Unavailable,
	ReasonIdleTimeout:          codes.DeadlineExceeded,
	ReasonDrainDeadline:        codes.DeadlineExceeded,
	ReasonTooManyStreams:       codes.ResourceExhausted,
	ReasonTooManyUploads:       codes.ResourceExhausted,
	ReasonTokenMissing:         codes.Unauthenticated,
	ReasonTokenInvalid:         codes.Unauthenticated,
	auth.ReasonTokenExpired:    codes.Unauthenticated,
	auth.ReasonOtherUser:       codes.PermissionDenied,
	rpcstatus.ReasonInternal:   codes.Internal,
}

// fail returns the gRPC error of reason, with the code reasonCodes gives
// it; the one way the upload front builds its errors, besides the
// overload ones (rpcstatus.Overload with a retry-after). A reason missing
// from the table is a bug (TestReasonTable) and is sent as INTERNAL.
func fail(reason, format string, args ...any) error {
	code, ok := reasonCodes[reason]
	if !ok {
		code = codes.Internal
	}
	return rpcstatus.New(code, reason, format, args...)
}

// errInternal is fail(rpcstatus.ReasonInternal) for an unexpected error.
func errInternal(err error) error {
	return fail(rpcstatus.ReasonInternal, "%v", err)
}
