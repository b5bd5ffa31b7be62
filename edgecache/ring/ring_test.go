package ring_test

import (
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"testing"

	"willow/edgecache/ring"
)

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("s.a.upload-a-1.%032x/thumb", i)
	}
	return ks
}

func TestDistribution(t *testing.T) {
	for _, tc := range []struct {
		members int
		vnodes  int
		maxSkew float64 // largest share / fair share
	}{
		{members: 3, vnodes: 100, maxSkew: 1.25},
		{members: 5, vnodes: 100, maxSkew: 1.3},
		{members: 10, vnodes: 200, maxSkew: 1.3},
	} {
		t.Run(fmt.Sprintf("%d members %d vnodes", tc.members, tc.vnodes), func(t *testing.T) {
			var ms []string
			for i := range tc.members {
				ms = append(ms, fmt.Sprintf("edge-a-%d", i+1))
			}
			r := ring.New(tc.vnodes, nil, ms...)
			count := map[string]int{}
			ks := keys(100_000)
			for _, k := range ks {
				count[r.Get(k)]++
			}
			fair := float64(len(ks)) / float64(tc.members)
			for _, m := range ms {
				if skew := float64(count[m]) / fair; skew > tc.maxSkew || skew < 2-tc.maxSkew {
					t.Errorf("%s owns %d keys, %.2f of its fair share", m, count[m], skew)
				}
			}
		})
	}
}

func TestStabilityOnMembershipChange(t *testing.T) {
	ms := []string{"edge-a-1", "edge-a-2", "edge-a-3", "edge-a-4"}
	before := ring.New(0, nil, ms...)
	grown := ring.New(0, nil, append(ms, "edge-a-5")...)
	shrunk := ring.New(0, nil, ms[1:]...)
	ks := keys(50_000)
	var movedGrow, movedShrink int
	for _, k := range ks {
		b := before.Get(k)
		if g := grown.Get(k); g != b {
			movedGrow++
			if g != "edge-a-5" {
				t.Fatalf("key %s moved from %s to %s, not to the new member", k, b, g)
			}
		}
		if s := shrunk.Get(k); s != b {
			movedShrink++
			if b != "edge-a-1" {
				t.Fatalf("key %s moved from %s to %s though its owner stayed", k, b, s)
			}
		}
	}
	// Adding a fifth member should move about 1/5 of the keys, removing one
	// of four about 1/4.
	if f := float64(movedGrow) / float64(len(ks)); f < 0.12 || f > 0.28 {
		t.Errorf("adding a member moved %.3f of the keys", f)
	}
	if f := float64(movedShrink) / float64(len(ks)); f < 0.17 || f > 0.33 {
		t.Errorf("removing a member moved %.3f of the keys", f)
	}
}

func TestOrderAndDuplicatesIrrelevant(t *testing.T) {
	a := ring.New(50, nil, "x", "y", "z")
	b := ring.New(50, nil, "z", "", "y", "x", "y")
	if a.Len() != 3 || b.Len() != 3 {
		t.Fatalf("members %v %v", a.Members(), b.Members())
	}
	for _, k := range keys(2000) {
		if a.Get(k) != b.Get(k) {
			t.Fatalf("rings disagree on %s", k)
		}
	}
}

func TestInjectedHashAndEmpty(t *testing.T) {
	if got := ring.New(10, nil).Get("k"); got != "" {
		t.Fatalf("empty ring returned %q", got)
	}
	crc := func(b []byte) uint64 { return uint64(crc32.ChecksumIEEE(b)) }
	r1 := ring.New(10, crc, "a", "b")
	r2 := ring.New(10, crc, "a", "b")
	for _, k := range keys(500) {
		if r1.Get(k) != r2.Get(k) {
			t.Fatal("same hash, different owners")
		}
	}
	// A constant hash puts every point and key at 0: the smallest member
	// (ties broken by name) owns everything.
	zero := ring.New(10, func([]byte) uint64 { return 0 }, "b", "a")
	if got := zero.Get("anything"); got != "a" {
		t.Fatalf("constant hash: owner %q, want a", got)
	}
}

// The string hash Get uses is DefaultHash: FNV-1a from hash/fnv, then the
// finalizer. A change here would move every key of a running OC.
func TestDefaultHashIsFNV1a(t *testing.T) {
	for _, key := range []string{"", "a", "node#1", "s.a.up-1.0123456789abcdef0123456789abcdef/medium"} {
		h := fnv.New64a()
		h.Write([]byte(key))
		x := h.Sum64()
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		if got := ring.DefaultHash([]byte(key)); got != x {
			t.Errorf("DefaultHash(%q) = %x, want %x", key, got, x)
		}
	}
}

func TestGetAllocatesNothing(t *testing.T) {
	r := ring.New(0, nil, "edge-1", "edge-2", "edge-3")
	if n := testing.AllocsPerRun(100, func() { r.Get("s.a.up-1.0123456789abcdef0123456789abcdef/medium") }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
}
