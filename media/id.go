// Package media names media items. A media ID says where the raw bytes of an
// item live (the object store, buffer pool 1 or buffer pool 2 of one upload
// front) so that every reader knows where to look without a lookup service.
//
// The text form is LOC.REGION.NODE.KEY, for example
//
//	s.a.upload-a-1.3f9a0c...e1   (32 lowercase hex digits of KEY)
//
// LOC is "s" (store), "p1" (pool 1) or "p2" (pool 2); REGION and NODE are the
// region and node ID of the upload front that accepted it, [a-z0-9-]; KEY is
// derived from the user and the client's upload ID, so the same upload ID of
// the same user always names the same item. Store object keys use KEY only,
// so an item keeps its ID when a pool drains it into the store.
package media

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Loc is where the raw bytes of a media item were first made durable.
type Loc string

// The locations.
const (
	LocStore Loc = "s"
	LocPool1 Loc = "p1"
	LocPool2 Loc = "p2"
)

// ErrBadID is returned (wrapped) by Parse for a malformed media ID.
var ErrBadID = errors.New("malformed media id")

// ID is a parsed media ID.
type ID struct {
	Loc    Loc
	Region string
	Node   string
	Key    string // 32 lowercase hex digits
}

// KeyFor derives the item key of an upload: the same user and upload ID
// always give the same key.
func KeyFor(user, uploadID string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + uploadID))
	return hex.EncodeToString(sum[:16])
}

// String returns the text form.
func (id ID) String() string {
	return string(id.Loc) + "." + id.Region + "." + id.Node + "." + id.Key
}

// Parse parses the text form; errors wrap ErrBadID.
func Parse(s string) (ID, error) {
	if len(s) > 200 {
		return ID{}, fmt.Errorf("%w: too long", ErrBadID)
	}
	loc, rest, ok1 := strings.Cut(s, ".")
	region, rest, ok2 := strings.Cut(rest, ".")
	node, key, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 || strings.Contains(key, ".") {
		return ID{}, fmt.Errorf("%w: want LOC.REGION.NODE.KEY", ErrBadID)
	}
	id := ID{Loc: Loc(loc), Region: region, Node: node, Key: key}
	switch id.Loc {
	case LocStore, LocPool1, LocPool2:
	default:
		return ID{}, fmt.Errorf("%w: unknown location %q", ErrBadID, loc)
	}
	if !ValidName(id.Region) || !ValidName(id.Node) {
		return ID{}, fmt.Errorf("%w: bad region or node", ErrBadID)
	}
	if len(id.Key) != 32 || !isHex(id.Key) {
		return ID{}, fmt.Errorf("%w: key must be 32 hex digits", ErrBadID)
	}
	return id, nil
}

// ValidName reports whether s is a valid region or node name: 1 to 63
// characters of [a-z0-9-].
func ValidName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// RawKey is the store key of an item's raw bytes.
func RawKey(key string) string { return "raw/" + key }

// VariantKey is the store key of one variant of an item.
func VariantKey(key, variant string) string { return "v/" + key + "/" + variant }

// RecordKey is the store key of an item's JSON record (kind, size, SHA-256,
// variants).
func RecordKey(key string) string { return "m/" + key + ".json" }

// Variant names.
const (
	VariantRaw    = "raw"
	VariantThumb  = "thumb"
	VariantMedium = "medium"
	VariantLarge  = "large"
	VariantVideo  = "video"
	VariantPoster = "poster"
)

// ValidVariant reports whether v names a variant.
func ValidVariant(v string) bool {
	switch v {
	case VariantRaw, VariantThumb, VariantMedium, VariantLarge, VariantVideo, VariantPoster:
		return true
	}
	return false
}
