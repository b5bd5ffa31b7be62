package flex

import (
	"slices"
	"time"
)

// Business is one business of the product (DESIGN.md section 3): the
// shed_ratio.BUSINESS knob exists for it, the upload front accepts it, and
// the shedder ranks its requests by Priority (1 = highest). Public
// downloads are served by an edge without a signed URL; every other
// business's downloads are signed (edgecache.Config.URLKeys).
// MaxVideoDuration, when set, is the business's default video duration
// limit (package limits; the limits: section's max_video_duration
// overrides it); unset, the business gets limits' default.
type Business struct {
	Name             string
	Priority         int
	Public           bool
	MaxVideoDuration time.Duration
}

// DefaultBusiness is the business of a request that names none.
const DefaultBusiness = "moments"

// businessTable is the one list of businesses. Adding a business here
// adds its shed_ratio knob, makes the upload front accept it and gives it
// its admission priority and its video duration limit.
var businessTable = []Business{
	{Name: "moments", Priority: 1, MaxVideoDuration: 60 * time.Second}, // short videos
	{Name: "comment", Priority: 2},
	{Name: "avatar", Priority: 3, Public: true},
	{Name: "prefetch", Priority: 4},
}

// Businesses returns the business table, highest priority first.
func Businesses() []Business { return slices.Clone(businessTable) }

// BusinessNames returns the business names, sorted.
func BusinessNames() []string {
	names := make([]string, len(businessTable))
	for i, b := range businessTable {
		names[i] = b.Name
	}
	slices.Sort(names)
	return names
}

// KnownBusiness reports whether name is in the business table.
func KnownBusiness(name string) bool {
	return slices.ContainsFunc(businessTable, func(b Business) bool { return b.Name == name })
}

// PublicBusinesses returns the names of the businesses whose downloads
// are public, sorted.
func PublicBusinesses() []string {
	var names []string
	for _, b := range businessTable {
		if b.Public {
			names = append(names, b.Name)
		}
	}
	slices.Sort(names)
	return names
}

// Priorities maps each business to its priority (1 = highest).
func Priorities() map[string]int {
	m := make(map[string]int, len(businessTable))
	for _, b := range businessTable {
		m[b.Name] = b.Priority
	}
	return m
}
