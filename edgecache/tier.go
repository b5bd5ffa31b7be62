package edgecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"willow/edgecache/s4lru"
)

// object is one cached variant. It is immutable once built.
type object struct {
	data        []byte
	contentType string
	etag        string // quoted, strong
}

// etagOf returns the strong ETag of content: a quoted prefix of its
// SHA-256.
func etagOf(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// contentType returns the stored content type, or one sniffed from the
// bytes when the store has none better than application/octet-stream
// (HEIF brands, which net/http does not know, first).
func contentType(stored string, data []byte) string {
	if stored != "" && stored != "application/octet-stream" {
		return stored
	}
	if len(data) >= 12 && string(data[4:8]) == "ftyp" {
		switch string(data[8:12]) {
		case "heic", "heix", "heim", "heis", "mif1", "msf1":
			return "image/heic"
		}
	}
	if ct := http.DetectContentType(data); ct != "text/plain; charset=utf-8" || stored == "" {
		return ct
	}
	return stored
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
	t.c.Add(key, o, int64(len(o.data)))
}

// diskTier keeps objects as files under dir, indexed by an in-memory
// S4LRU bounded in bytes; evicted files are deleted. Each object is two
// files: NAME (the bytes) and NAME.json (content type and ETag).
type diskTier struct {
	dir string
	mu  sync.Mutex // guards c and the files
	c   *s4lru.Cache[struct{}]
}

type diskMeta struct {
	ContentType string `json:"content_type"`
	ETag        string `json:"etag"`
}

func newDiskTier(base string, capacity int64, onEvict func()) (*diskTier, error) {
	dir := filepath.Join(base, "objects")
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("edgecache: reset disk tier: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("edgecache: disk tier: %w", err)
	}
	d := &diskTier{dir: dir}
	d.c = s4lru.New(s4lru.Config[struct{}]{
		CapacityBytes: capacity,
		OnEvict: func(key string, _ struct{}, _ int64) {
			p := d.path(key)
			os.Remove(p)
			os.Remove(p + ".json")
			onEvict()
		},
	})
	return d, nil
}

func (d *diskTier) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, hex.EncodeToString(sum[:]))
}

// get reads key from disk; a missing or unreadable file is a miss.
func (d *diskTier) get(key string) (*object, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.c.Get(key); !ok {
		return nil, false
	}
	p := d.path(key)
	data, err := os.ReadFile(p)
	if err != nil {
		d.c.Remove(key)
		return nil, false
	}
	mb, err := os.ReadFile(p + ".json")
	var m diskMeta
	if err == nil {
		err = json.Unmarshal(mb, &m)
	}
	if err != nil {
		d.c.Remove(key)
		return nil, false
	}
	return &object{data: data, contentType: m.ContentType, etag: m.ETag}, true
}

// add writes o for key; failures leave the tier without it.
func (d *diskTier) add(key string, o *object) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.path(key)
	mb, _ := json.Marshal(diskMeta{ContentType: o.contentType, ETag: o.etag})
	err := errors.Join(writeFile(p, o.data), writeFile(p+".json", mb))
	if err != nil {
		os.Remove(p)
		os.Remove(p + ".json")
		return fmt.Errorf("edgecache: disk tier write: %w", err)
	}
	if !d.c.Add(key, struct{}{}, int64(len(o.data))) {
		os.Remove(p)
		os.Remove(p + ".json")
	}
	return nil
}

func writeFile(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
