package media

// ReasonProcessing is the reason of a media read of an item (or a variant)
// that exists but is not made yet; try again later (NOT_FOUND, HTTP 404).
// The upload front's GetMedia and ReadPool and the edge send it; other
// edges, the client, the CLI and loadgen read it. An unknown item is
// rpcstatus.ReasonNotFound.
const ReasonProcessing = "processing"
