package timeline

// Reasons of the timeline's errors (Server.status and the post checks),
// besides rpcstatus.ReasonBadRequest, ReasonDeadline and ReasonCanceled
// and redisconn.ReasonRedis (UNAVAILABLE).
const (
	// ReasonBadCursor: a page cursor that does not parse (INVALID_ARGUMENT).
	ReasonBadCursor = "bad_cursor"
)

// Reason codes of refused posts.
const (
	// ReasonNotMediaOwner: a post names media another user uploaded
	// (PERMISSION_DENIED).
	ReasonNotMediaOwner = "not_media_owner"
	// ReasonUnknownMedia: a post names media that does not exist
	// (INVALID_ARGUMENT).
	ReasonUnknownMedia = "unknown_media"
	// ReasonMediaLookup: the upload fronts could not say who owns a media
	// item (UNAVAILABLE; retry).
	ReasonMediaLookup = "media_lookup"
)
