package upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
)

// Record locations and states.
const (
	LocationStore = "store"
	LocationPool1 = "pool1"
	LocationPool2 = "pool2"

	StateProcessing = "processing"
	StateReady      = "ready"
	// StateFailed is the dead-letter state: compress refused the bytes
	// for good (INVALID_ARGUMENT: undecodable, over a limit); Reason and
	// Error say why. Only an operator's RetryMedia leaves it.
	StateFailed = "failed"
)

// Record is a media item's JSON record, stored at media.RecordKey(key) in
// the store, or as the metadata of the raw blob in a buffer pool.
type Record struct {
	ID          string         `json:"id"`
	Kind        string         `json:"kind"` // image | video
	Business    string         `json:"business"`
	User        string         `json:"user"`
	UploadID    string         `json:"upload_id"`
	Size        int64          `json:"size"`
	SHA256      string         `json:"sha256"`
	ContentType string         `json:"content_type,omitempty"`
	Location    string         `json:"location"` // where the raw is now
	State       string         `json:"state"`
	Variants    []VariantEntry `json:"variants"`
	Created     time.Time      `json:"created"`
	DrainedAt   time.Time      `json:"drained_at,omitzero"`
	// Reason (a reason code) and Error (its message) say why State is
	// StateFailed; FailedAt is when.
	Reason   string    `json:"reason,omitempty"`
	Error    string    `json:"error,omitempty"`
	FailedAt time.Time `json:"failed_at,omitzero"`
	// Attempts counts compress attempts that failed.
	Attempts int `json:"attempts,omitempty"`
}

// VariantEntry describes one variant in a record (never its bytes).
type VariantEntry struct {
	Name        string `json:"name"`
	Codec       string `json:"codec,omitempty"`
	Quality     int32  `json:"quality,omitempty"`
	Width       int32  `json:"width,omitempty"`
	Height      int32  `json:"height,omitempty"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256,omitempty"`
	ContentType string `json:"content_type,omitempty"`
}

func kindName(k willowv1.Kind) string {
	if k == willowv1.Kind_KIND_VIDEO {
		return "video"
	}
	return "image"
}

func kindOf(s string) willowv1.Kind {
	if s == "video" {
		return willowv1.Kind_KIND_VIDEO
	}
	return willowv1.Kind_KIND_IMAGE
}

// variantNames are the variants compress makes for a kind.
func variantNames(kind string) []string {
	if kind == "video" {
		return []string{media.VariantVideo, media.VariantPoster}
	}
	return []string{media.VariantThumb, media.VariantMedium, media.VariantLarge}
}

func variantFromProto(v *willowv1.Variant) VariantEntry {
	return VariantEntry{Name: v.GetName(), Codec: v.GetCodec(), Quality: v.GetQuality(), Width: v.GetWidth(),
		Height: v.GetHeight(), Bytes: v.GetBytes(), SHA256: v.GetSha256(), ContentType: v.GetContentType()}
}

func (v VariantEntry) proto() *willowv1.Variant {
	return &willowv1.Variant{Name: v.Name, Codec: v.Codec, Quality: v.Quality, Width: v.Width, Height: v.Height,
		Bytes: v.Bytes, Sha256: v.SHA256, ContentType: v.ContentType}
}

func (r *Record) variantsProto() []*willowv1.Variant {
	out := make([]*willowv1.Variant, 0, len(r.Variants))
	for _, v := range r.Variants {
		out = append(out, v.proto())
	}
	return out
}

func (r *Record) mediaProto() *willowv1.Media {
	return &willowv1.Media{MediaId: r.ID, Kind: kindOf(r.Kind), Business: r.Business, User: r.User, Size: r.Size,
		Sha256: r.SHA256, Location: r.Location, State: r.State, Variants: r.variantsProto(), CreatedAtUnixMs: r.Created.UnixMilli(),
		Reason: r.Reason, Error: r.Error, Attempts: int32(r.Attempts)}
}

func (r *Record) key() string {
	id, err := media.Parse(r.ID)
	if err != nil {
		return ""
	}
	return id.Key
}

// readRecord reads the store record of key; found is false on ErrNotFound.
func readRecord(ctx context.Context, st store.Store, key string) (Record, bool, error) {
	return readJSON[Record](ctx, st, media.RecordKey(key))
}

// readJSON reads the small JSON object at object (at most 1 MiB) into a
// T; found is false on ErrNotFound. The media record and the resume
// session record are both kept so.
func readJSON[T any](ctx context.Context, st store.Store, object string) (v T, found bool, err error) {
	rc, _, err := st.Get(ctx, object)
	if errors.Is(err, store.ErrNotFound) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return v, false, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, false, fmt.Errorf("%s: %w", object, err)
	}
	return v, true, nil
}

// writeJSON writes v as the JSON object at object.
func writeJSON(ctx context.Context, st store.Store, object string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.Put(ctx, object, bytes.NewReader(b), int64(len(b)), "application/json")
}

func writeRecord(ctx context.Context, st store.Store, rec Record) error {
	return writeJSON(ctx, st, media.RecordKey(rec.key()), rec)
}
