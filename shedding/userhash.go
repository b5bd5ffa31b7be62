package shedding

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// UserHash is Willow's one user hash: a keyed SipHash of the user ID and
// the hour. The shedder's user priority and shed_ratio set, the edge's
// shedding without a shedder and the timeline's delayed users all read it,
// so within one hour a user is treated alike by every service: the users
// an edge sheds are the ones the upload front sheds and the timeline
// holds. The hour makes a user share a fate within an hour, not forever.
// The zero value is not meaningful; use NewUserHash.
type UserHash struct{ key sipKey }

// NewUserHash returns the user hash under key; empty means DefaultUserKey.
// Every service of a cluster must use the same key.
func NewUserHash(key []byte) UserHash {
	if len(key) == 0 {
		key = []byte(DefaultUserKey)
	}
	return UserHash{key: deriveKey(key)}
}

func deriveKey(k []byte) sipKey {
	sum := sha256.Sum256(k)
	return sipKey{binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])}
}

// Sum is the 64-bit hash of user in the hour of now. Its top bits are the
// user priority: higher is less important.
func (h UserHash) Sum(user string, now time.Time) uint64 {
	return h.key.sum64(user, uint64(now.Unix()/3600))
}

// Priority returns user's priority at now, 0 (highest) .. UserLevels-1.
func (h UserHash) Priority(user string, now time.Time) int { return int(h.Sum(user, now) >> 57) }

// Unit maps user at now into [0, 1), lowest priority first: the users
// under r are the fraction r of least priority. The value is exactly
// representable as a float64 (and a Redis sorted-set score).
func (h UserHash) Unit(user string, now time.Time) float64 { return unitOf(h.Sum(user, now)) }

// unitOf maps a Sum to Unit: the complement, so the top of the hash range
// (the lowest priority) comes first.
func unitOf(sum uint64) float64 { return float64(^sum>>11) / (1 << 53) }

// InRatio reports whether user is among the fraction ratio of least
// priority at now: shed by shed_ratio, or held by timeline_delay_ratio. A
// user in at one ratio is in at every higher one; ratio <= 0 holds nobody
// and ratio >= 1 everybody.
func (h UserHash) InRatio(user string, now time.Time, ratio float64) bool {
	return inRatio(h.Sum(user, now), ratio)
}

func inRatio(sum uint64, ratio float64) bool {
	switch {
	case ratio <= 0:
		return false
	case ratio >= 1:
		return true
	}
	return unitOf(sum) < ratio
}
