// Package ring is a consistent hash ring with virtual nodes: it maps keys to
// members so that adding or removing one member moves only the keys that
// member gains or loses (about 1/N of them).
//
// A Ring is immutable and safe for concurrent use; build a new one when the
// membership changes. The hash is injected so tests are repeatable and so
// every node of a cluster, using the same hash, agrees on the owners.
package ring

import (
	"slices"
	"sort"
	"strconv"
)

// DefaultVirtualNodes is the number of points per member when New is given
// zero.
const DefaultVirtualNodes = 100

// Hash maps bytes to a point on the ring.
type Hash func(data []byte) uint64

// Ring maps keys to members.
type Ring struct {
	hash    func(key string) uint64
	points  []uint64 // sorted
	owners  []string // owners[i] owns points[i]
	members []string // sorted, unique
}

// New returns a ring of members with vnodes points each (zero: the
// default) placed by hash (nil: DefaultHash). Duplicate and empty members
// are ignored.
func New(vnodes int, hash Hash, members ...string) *Ring {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	r := &Ring{hash: hashString}
	if hash != nil {
		r.hash = func(key string) uint64 { return hash([]byte(key)) }
	}
	ms := make([]string, 0, len(members))
	for _, m := range members {
		if m != "" {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	ms = slices.Compact(ms)
	r.members = ms
	type point struct {
		h     uint64
		owner string
	}
	pts := make([]point, 0, len(ms)*vnodes)
	for _, m := range ms {
		for i := range vnodes {
			pts = append(pts, point{r.hash(m + "#" + strconv.Itoa(i)), m})
		}
	}
	// Ties are broken by member name so every node builds the same ring.
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].owner < pts[j].owner
	})
	r.points = make([]uint64, len(pts))
	r.owners = make([]string, len(pts))
	for i, p := range pts {
		r.points[i], r.owners[i] = p.h, p.owner
	}
	return r
}

// Get returns the member owning key, or "" for an empty ring.
func (r *Ring) Get(key string) string {
	if len(r.points) == 0 {
		return ""
	}
	h := r.hash(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	if i == len(r.points) {
		i = 0
	}
	return r.owners[i]
}

// Members returns the members, sorted.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// DefaultHash is 64-bit FNV-1a followed by the splitmix64 finalizer (FNV
// alone clusters similar keys such as "node#1", "node#2").
func DefaultHash(data []byte) uint64 { return hashString(string(data)) }

// hashString is DefaultHash of a string, without allocating (Get runs
// per request).
func hashString(s string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	x := uint64(offset64) // FNV-1a
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= prime64
	}
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
