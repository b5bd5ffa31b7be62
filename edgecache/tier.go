package edgecache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"time"

	"willow/edgecache/s4lru"
)

// object is one cache entry: a whole representation of a variant, the head
// of a sliced one (size and headers, no bytes), or one slice of it. It is
// immutable once built.
type object struct {
	data        []byte // the whole content, or the slice's bytes; nil in a head
	contentType string
	etag        string    // quoted, strong
	modTime     time.Time // Last-Modified; zero when unknown
	size        int64     // of the whole representation
	sliced      bool      // a head: the bytes are in slice entries

	hdrOnce sync.Once
	hdr     objectHeaders
}

// objectHeaders are the response header values of a whole object, made
// once per object: a hit then sets headers without allocating. net/http
// only reads them.
type objectHeaders struct {
	contentType, etag, contentLength []string
	lastModified                     []string // nil when modTime is zero

	// wire is the same header lines as the hit path writes them
	// (hitpath.go): Content-Length, Content-Type, Content-Disposition when
	// safeHeaders sets it, Etag, Last-Modified.
	wire []byte
}

func (o *object) headers() *objectHeaders {
	o.hdrOnce.Do(func() {
		o.hdr = objectHeaders{
			contentType:   []string{o.contentType},
			etag:          []string{o.etag},
			contentLength: []string{strconv.Itoa(len(o.data))},
		}
		if !o.modTime.IsZero() {
			o.hdr.lastModified = []string{o.modTime.UTC().Format(http.TimeFormat)}
		}
		w := append([]byte("Content-Length: "), o.hdr.contentLength[0]...)
		w = append(append(w, "\r\nContent-Type: "...), o.contentType...)
		if attachment(o.contentType) {
			w = append(w, "\r\nContent-Disposition: attachment"...)
		}
		w = append(append(w, "\r\nEtag: "...), o.etag...)
		if o.hdr.lastModified != nil {
			w = append(append(w, "\r\nLast-Modified: "...), o.hdr.lastModified[0]...)
		}
		o.hdr.wire = append(w, "\r\n"...)
	})
	return &o.hdr
}

// Header values every hit shares (read-only).
var (
	cacheControlValue = []string{cacheControl}
	varyAccept        = []string{"Accept"}
	acceptRangesBytes = []string{"bytes"}
)

// cost is the bytes an entry holds in a tier (a head costs a little).
func (o *object) cost() int64 { return int64(len(o.data)) + 128 }

// etagOf returns the strong ETag of content: a quoted prefix of its
// SHA-256.
func etagOf(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// memTier is a locked in-memory S4LRU of objects.
type memTier struct {
	mu sync.Mutex // guards c
	c  *s4lru.Cache[*object]
}

func newMemTier(capacity int64, onEvict func()) *memTier {
	return &memTier{c: s4lru.New(s4lru.Config[*object]{
		CapacityBytes: capacity,
		OnEvict:       func(string, *object, int64) { onEvict() },
	})}
}

func (t *memTier) get(key string) (*object, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c.Get(key)
}

func (t *memTier) add(key string, o *object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.c.Add(key, o, o.cost())
}
