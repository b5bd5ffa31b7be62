package limits

// Reasons of a refusal for a limit, sent alike by the upload front (before
// the acknowledgement) and compress (before it decodes); the edge relays
// them.
const (
	// ReasonTooLarge: an upload's size is over MaxImageBytes or
	// MaxVideoBytes (INVALID_ARGUMENT). The edge sends it as
	// FAILED_PRECONDITION for a variant over its fill bound.
	ReasonTooLarge = "too_large"
	// ReasonTooLong: a video is over its business's VideoDuration
	// (INVALID_ARGUMENT).
	ReasonTooLong = "too_long"
	// ReasonPixelBomb: an image's or frame's header claims more than
	// MaxPixels (INVALID_ARGUMENT).
	ReasonPixelBomb = "pixel_bomb"
)
