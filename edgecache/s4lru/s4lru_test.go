package s4lru_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"willow/edgecache/s4lru"
)

func TestByteBoundHolds(t *testing.T) {
	for _, segs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("segments=%d", segs), func(t *testing.T) {
			const capacity = 10_000
			c := s4lru.New(s4lru.Config[int]{CapacityBytes: capacity, Segments: segs})
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 20_000 {
				k := fmt.Sprint(rng.IntN(200))
				if rng.IntN(2) == 0 {
					c.Add(k, i, int64(1+rng.IntN(capacity/segs)))
				} else {
					c.Get(k)
				}
				if c.Bytes() > capacity {
					t.Fatalf("step %d: %d bytes held, capacity %d", i, c.Bytes(), capacity)
				}
				for s := range segs {
					if c.SegmentBytes(s) > capacity/int64(segs) {
						t.Fatalf("step %d: segment %d holds %d bytes", i, s, c.SegmentBytes(s))
					}
				}
			}
		})
	}
}

func TestTooLargeNotAdmitted(t *testing.T) {
	c := s4lru.New(s4lru.Config[string]{CapacityBytes: 400})
	if c.Add("big", "x", 101) {
		t.Fatal("a value larger than one segment was admitted")
	}
	if !c.Add("ok", "x", 100) {
		t.Fatal("a value of one segment's size was refused")
	}
	if c.Add("ok", "y", 101) {
		t.Fatal("replacement too large was admitted")
	}
	if _, ok := c.Get("ok"); ok {
		t.Fatal("old value kept after a refused replacement")
	}
}

func TestPromotionAndEvictionOrder(t *testing.T) {
	var evicted []string
	// 4 segments of 20 bytes: two 10-byte values per segment.
	c := s4lru.New(s4lru.Config[int]{CapacityBytes: 80, OnEvict: func(k string, _ int, _ int64) { evicted = append(evicted, k) }})
	for _, k := range []string{"a", "b"} {
		c.Add(k, 0, 10)
	}
	c.Get("a") // a -> segment 1
	c.Get("a") // a -> segment 2
	for _, k := range []string{"c", "d", "e"} {
		c.Add(k, 0, 10) // segment 0 holds two: b and c are evicted
	}
	if want := []string{"b", "c"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
	if _, ok := c.Peek("a"); !ok {
		t.Fatal("promoted a was evicted")
	}
	if want := []string{"a", "e", "d"}; !slices.Equal(c.Keys(), want) {
		t.Fatalf("keys %v, want %v", c.Keys(), want)
	}
	// A hit on d moves it up; the overflow of segment 1 is pushed down.
	c.Get("d")
	c.Add("f", 0, 10)
	c.Add("g", 0, 10)
	if want := []string{"b", "c", "e"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
	if want := []string{"a", "d", "g", "f"}; !slices.Equal(c.Keys(), want) {
		t.Fatalf("keys %v, want %v", c.Keys(), want)
	}
}

func TestDemotionCascades(t *testing.T) {
	// 2 segments of 20 bytes.
	c := s4lru.New(s4lru.Config[int]{CapacityBytes: 40, Segments: 2})
	for _, k := range []string{"a", "b", "c"} {
		c.Add(k, 0, 10)
		c.Get(k) // each goes to the top segment
	}
	// The top holds c, b; a was pushed down to segment 0.
	if want := []string{"c", "b", "a"}; !slices.Equal(c.Keys(), want) {
		t.Fatalf("keys %v, want %v", c.Keys(), want)
	}
	if c.SegmentBytes(1) != 20 || c.SegmentBytes(0) != 10 {
		t.Fatalf("segments hold %d, %d", c.SegmentBytes(0), c.SegmentBytes(1))
	}
}

func TestLRUWithOneSegment(t *testing.T) {
	c := s4lru.New(s4lru.Config[int]{CapacityBytes: 30, Segments: 1})
	c.Add("a", 1, 10)
	c.Add("b", 2, 10)
	c.Add("c", 3, 10)
	c.Get("a")
	c.Add("d", 4, 10) // evicts b, the least recently used
	if _, ok := c.Peek("b"); ok {
		t.Fatal("b not evicted")
	}
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("a = %d, %v", v, ok)
	}
	if !c.Remove("a") || c.Remove("a") || c.Len() != 2 || c.Bytes() != 20 {
		t.Fatalf("after remove: len %d bytes %d", c.Len(), c.Bytes())
	}
}
