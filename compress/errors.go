package compress

import (
	"errors"

	"willow/mediaheader"
)

// Errors. Callers test them with errors.Is; the server turns them into gRPC
// statuses with the reasons of reasons.go (Server.status). A header's
// verdict is reported with mediaheader's own sentinels, which the decoders
// reuse for bad pixel data.
var (
	ErrPixelBomb     = mediaheader.ErrPixelBomb
	ErrCorrupt       = mediaheader.ErrCorrupt
	ErrUnsupported   = mediaheader.ErrUnsupported
	ErrTooLarge      = errors.New("media over the size limit")
	ErrTooLong       = errors.New("video over the duration limit")
	ErrSourceMissing = errors.New("source object missing")
	ErrOverload      = errors.New("compress worker overloaded")
)
