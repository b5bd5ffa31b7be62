package edgecache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"willow/media"
)

// ErrFailed: the media item ended in the upload front's dead-letter state
// failed (its bytes cannot be made into variants); no variant will ever
// exist. HTTP 422 and gRPC FAILED_PRECONDITION, with the item's reason.
var ErrFailed = errors.New("media failed")

// FailedError is ErrFailed with the item's reason code (e.g. pixel_bomb,
// corrupt_media) and message.
type FailedError struct {
	ID      media.ID
	Reason  string
	Message string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("media %s failed: %s: %s", e.ID, e.Reason, e.Message)
}

// Is makes errors.Is(err, ErrFailed) true.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// failedOf reads the media record of id (upload.Record in the store) and
// returns a *FailedError when its state is failed, nil otherwise or when
// the record cannot be read (the caller keeps its not-found answer).
func (s *Server) failedOf(ctx context.Context, id media.ID) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	rc, _, err := s.store.Get(ctx, media.RecordKey(id.Key))
	if err != nil {
		return nil
	}
	defer rc.Close()
	var rec struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&rec) != nil || rec.State != "failed" {
		return nil
	}
	return &FailedError{ID: id, Reason: rec.Reason, Message: rec.Error}
}
