// Package s4lru is a byte-bounded segmented LRU cache (S4LRU, Huang et al.,
// "An Analysis of Facebook Photo Caching", SOSP 2013).
//
// The capacity is split evenly among N segments (default 4). A new key
// enters the head of segment 0; a hit moves a key to the head of the next
// segment up (the top segment keeps it at its head). A segment over its
// share pushes its tail down to the head of the segment below; the tail of
// segment 0 is evicted. With one segment the cache is a plain LRU.
//
// Guarantees: after every call the bytes held are at most the capacity; a
// value larger than one segment's share is not admitted. A Cache is not safe
// for concurrent use: the caller locks.
package s4lru

import "container/list"

// DefaultSegments is the number of segments when Config.Segments is zero.
const DefaultSegments = 4

// Config configures a Cache. Zero values mean the documented default.
type Config[V any] struct {
	// CapacityBytes bounds the total size of the values held; required > 0.
	CapacityBytes int64
	// Segments is the number of LRU segments; default DefaultSegments. One
	// segment gives a plain LRU.
	Segments int
	// OnEvict, when set, is called for each value evicted to make room
	// (not for Remove or for a replaced value).
	OnEvict func(key string, v V, size int64)
}

// Cache is a byte-bounded S4LRU cache. The zero value is not usable; use New.
type Cache[V any] struct {
	segCap  int64
	segs    []segment
	items   map[string]*list.Element
	bytes   int64
	onEvict func(string, V, int64)
}

type segment struct {
	ll    *list.List
	bytes int64
}

type entry[V any] struct {
	key  string
	v    V
	size int64
	seg  int
}

// New returns an empty cache. It panics if CapacityBytes is not positive
// (a programming error, as in container packages).
func New[V any](cfg Config[V]) *Cache[V] {
	if cfg.CapacityBytes <= 0 {
		panic("s4lru: CapacityBytes must be positive")
	}
	if cfg.Segments <= 0 {
		cfg.Segments = DefaultSegments
	}
	c := &Cache[V]{
		segCap:  cfg.CapacityBytes / int64(cfg.Segments),
		segs:    make([]segment, cfg.Segments),
		items:   make(map[string]*list.Element),
		onEvict: cfg.OnEvict,
	}
	for i := range c.segs {
		c.segs[i].ll = list.New()
	}
	return c
}

// Get returns the value of key and promotes it one segment up.
func (c *Cache[V]) Get(key string) (V, bool) {
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	e := el.Value.(*entry[V])
	if e.seg == len(c.segs)-1 {
		c.segs[e.seg].ll.MoveToFront(el)
		return e.v, true
	}
	from := e.seg
	c.segs[from].ll.Remove(el)
	c.segs[from].bytes -= e.size
	e.seg++
	c.items[key] = c.segs[e.seg].ll.PushFront(e)
	c.segs[e.seg].bytes += e.size
	c.rebalance(e.seg)
	return e.v, true
}

// Peek returns the value of key without promoting it.
func (c *Cache[V]) Peek(key string) (V, bool) {
	if el, ok := c.items[key]; ok {
		return el.Value.(*entry[V]).v, true
	}
	var zero V
	return zero, false
}

// Add inserts or replaces key with a value of size bytes. It reports
// whether the value is held: a value larger than one segment's share is
// not (and an older value of key is removed).
func (c *Cache[V]) Add(key string, v V, size int64) bool {
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	if size > c.segCap || size < 0 {
		return false
	}
	e := &entry[V]{key: key, v: v, size: size}
	c.items[key] = c.segs[0].ll.PushFront(e)
	c.segs[0].bytes += size
	c.bytes += size
	c.rebalance(0)
	return true
}

// Remove drops key; it reports whether it was held.
func (c *Cache[V]) Remove(key string) bool {
	el, ok := c.items[key]
	if ok {
		c.remove(el)
	}
	return ok
}

// Len returns the number of values held.
func (c *Cache[V]) Len() int { return len(c.items) }

// Bytes returns the total size of the values held.
func (c *Cache[V]) Bytes() int64 { return c.bytes }

// SegmentBytes returns the bytes held by segment i (0 is the lowest).
func (c *Cache[V]) SegmentBytes(i int) int64 { return c.segs[i].bytes }

// Keys returns the keys from the top segment's head to the bottom
// segment's tail: the order in which they would be evicted, last first.
func (c *Cache[V]) Keys() []string {
	keys := make([]string, 0, len(c.items))
	for i := len(c.segs) - 1; i >= 0; i-- {
		for el := c.segs[i].ll.Front(); el != nil; el = el.Next() {
			keys = append(keys, el.Value.(*entry[V]).key)
		}
	}
	return keys
}

func (c *Cache[V]) remove(el *list.Element) {
	e := el.Value.(*entry[V])
	c.segs[e.seg].ll.Remove(el)
	c.segs[e.seg].bytes -= e.size
	c.bytes -= e.size
	delete(c.items, e.key)
}

// rebalance pushes the overflow of segment top and every segment below it
// down one segment; segment 0's overflow is evicted.
func (c *Cache[V]) rebalance(top int) {
	for i := top; i > 0; i-- {
		s := &c.segs[i]
		for s.bytes > c.segCap {
			el := s.ll.Back()
			e := el.Value.(*entry[V])
			s.ll.Remove(el)
			s.bytes -= e.size
			e.seg = i - 1
			c.items[e.key] = c.segs[i-1].ll.PushFront(e)
			c.segs[i-1].bytes += e.size
		}
	}
	s := &c.segs[0]
	for s.bytes > c.segCap {
		el := s.ll.Back()
		e := el.Value.(*entry[V])
		c.remove(el)
		if c.onEvict != nil {
			c.onEvict(e.key, e.v, e.size)
		}
	}
}
