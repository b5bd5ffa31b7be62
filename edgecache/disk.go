package edgecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"willow/edgecache/s4lru"
)

// diskTier keeps entries as files under dir, indexed by an in-memory LRU
// (a one-segment S4LRU) bounded in bytes; evicted files are deleted. Each
// entry is two files: NAME (the bytes) and NAME.json (its key, size,
// SHA-256 and headers), NAME the hex SHA-256 of the key. Both are written
// to a temporary file and renamed into place, bytes first, so an entry
// whose .json exists had all its bytes written.
//
// The index survives a restart: newDiskTier rebuilds it from the .json
// files, oldest first by modification time (a hit touches the .json), and
// drops what it cannot trust: temporary files, bytes without a .json, a
// .json without bytes or whose size differs. Every read checks the bytes
// against the recorded SHA-256; a mismatch (a torn or corrupted file)
// deletes the entry and counts as a miss.
type diskTier struct {
	dir     string
	log     *slog.Logger
	onEvict func()
	mu      sync.Mutex // guards c and the files
	c       *s4lru.Cache[struct{}]
}

// diskMeta is the .json of one entry.
type diskMeta struct {
	Key         string `json:"key"`
	Bytes       int64  `json:"bytes"`  // length of the data file
	SHA256      string `json:"sha256"` // of the data file, hex
	ContentType string `json:"content_type"`
	ETag        string `json:"etag"`
	ModUnixMs   int64  `json:"mod_unix_ms,omitempty"`
	Size        int64  `json:"size"` // of the whole representation
	Sliced      bool   `json:"sliced,omitempty"`
}

// diskLoad says what newDiskTier found.
type diskLoad struct {
	Entries int   // entries kept
	Bytes   int64 // their data bytes
	Dropped int   // files deleted as torn, orphaned or temporary
}

func newDiskTier(base string, capacity int64, log *slog.Logger, onEvict func()) (*diskTier, diskLoad, error) {
	dir := filepath.Join(base, "objects")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, diskLoad{}, fmt.Errorf("edgecache: disk tier: %w", err)
	}
	d := &diskTier{dir: dir, log: log, onEvict: onEvict}
	d.c = s4lru.New(s4lru.Config[struct{}]{
		CapacityBytes: capacity,
		Segments:      1,
		OnEvict: func(key string, _ struct{}, _ int64) {
			d.removeFiles(key)
			d.onEvict()
		},
	})
	st, err := d.load()
	if err != nil {
		return nil, st, err
	}
	return d, st, nil
}

// load rebuilds the index from the files in dir.
func (d *diskTier) load() (diskLoad, error) {
	var st diskLoad
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return st, fmt.Errorf("edgecache: disk tier: %w", err)
	}
	type found struct {
		m   diskMeta
		mod time.Time
	}
	var keep []found
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	drop := func(name string) {
		if os.Remove(filepath.Join(d.dir, name)) == nil {
			st.Dropped++
		}
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".tmp"):
			drop(name)
		case strings.HasSuffix(name, ".json"):
			base := strings.TrimSuffix(name, ".json")
			m, err := d.readMeta(base)
			fi, ferr := os.Stat(filepath.Join(d.dir, base))
			if err != nil || ferr != nil || fi.Size() != m.Bytes || d.name(m.Key) != base {
				drop(name)
				drop(base)
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			keep = append(keep, found{m, info.ModTime()})
		default:
			if !names[name+".json"] {
				drop(name)
			}
		}
	}
	slices.SortFunc(keep, func(a, b found) int { return a.mod.Compare(b.mod) })
	for _, f := range keep {
		if d.c.Add(f.m.Key, struct{}{}, f.m.Bytes+128) {
			st.Entries++
			st.Bytes += f.m.Bytes
		}
	}
	return st, nil
}

func (d *diskTier) name(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func (d *diskTier) path(key string) string { return filepath.Join(d.dir, d.name(key)) }

func (d *diskTier) readMeta(base string) (diskMeta, error) {
	var m diskMeta
	b, err := os.ReadFile(filepath.Join(d.dir, base+".json"))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err == nil && m.Key == "" {
		err = errors.New("no key")
	}
	return m, err
}

func (d *diskTier) removeFiles(key string) {
	p := d.path(key)
	os.Remove(p + ".json")
	os.Remove(p)
}

// get reads key from disk; a missing, unreadable or corrupt entry is a miss
// (and a corrupt one is deleted).
func (d *diskTier) get(key string) (*object, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.c.Get(key); !ok {
		return nil, false
	}
	name := d.name(key)
	m, err := d.readMeta(name)
	var data []byte
	if err == nil {
		data, err = os.ReadFile(filepath.Join(d.dir, name))
	}
	if err == nil {
		sum := sha256.Sum256(data)
		if m.Key != key || int64(len(data)) != m.Bytes || hex.EncodeToString(sum[:]) != m.SHA256 {
			err = errors.New("checksum mismatch")
		}
	}
	if err != nil {
		d.log.Warn("disk tier entry dropped", "key", key, "err", err)
		d.c.Remove(key)
		d.removeFiles(key)
		return nil, false
	}
	now := time.Now()
	os.Chtimes(filepath.Join(d.dir, name+".json"), now, now) // recency for the next restart
	o := &object{data: data, contentType: m.ContentType, etag: m.ETag, size: m.Size, sliced: m.Sliced}
	if len(data) == 0 && !m.Sliced {
		o.data = []byte{}
	}
	if m.ModUnixMs != 0 {
		o.modTime = time.UnixMilli(m.ModUnixMs).UTC()
	}
	return o, true
}

// add writes o for key; failures leave the tier without it.
func (d *diskTier) add(key string, o *object) error {
	sum := sha256.Sum256(o.data)
	m := diskMeta{Key: key, Bytes: int64(len(o.data)), SHA256: hex.EncodeToString(sum[:]),
		ContentType: o.contentType, ETag: o.etag, Size: o.size, Sliced: o.sliced}
	if !o.modTime.IsZero() {
		m.ModUnixMs = o.modTime.UnixMilli()
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.path(key)
	if err := errors.Join(writeFile(p, o.data), writeFile(p+".json", mb)); err != nil {
		d.removeFiles(key)
		return fmt.Errorf("edgecache: disk tier write: %w", err)
	}
	if !d.c.Add(key, struct{}{}, m.Bytes+128) {
		d.removeFiles(key)
	}
	return nil
}

// len returns the number of entries.
func (d *diskTier) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.c.Len()
}

func writeFile(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
