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
	"sync/atomic"
	"syscall"
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
//
// An entry is known good once this process wrote it (add) or checked its
// bytes (get). Only a known-good entry is sent from its file (open: the
// HTTP hit path's sendfile), so a torn file left by a crash is never sent:
// after a restart every entry is checked by its first get before open
// will hand it out.
type diskTier struct {
	dir     string
	dirFile *os.File // dir, open: open's files are opened relative to it
	dirFD   int      // dirFile's descriptor
	log     *slog.Logger
	onEvict func()
	mu      sync.Mutex // guards c, its entries, the files, fds and closed
	c       *s4lru.Cache[*diskEntry]
	fds     []*diskEntry // entries given an open file, oldest replaced first
	next    int          // the slot of fds replaced next once it is full
	closed  bool         // close ran: open keeps no file open
	opened  atomic.Int64 // files open handed out (hits sent from a file)
}

// maxOpenFiles bounds the data files the tier keeps open for hits to send
// (one descriptor per entry, the oldest given up first).
const maxOpenFiles = 1024

// entryFile is an entry's open data file, shared by the hits sending it
// (sendfile at an explicit offset, so they share no file position). The
// entry holds one reference while it keeps the file open, each hit one
// while it sends; the last release closes the descriptor.
type entryFile struct {
	fd   int
	refs atomic.Int32
	// sentAt is when a hit last sent the whole file (Unix ns; the hit
	// path's warm test).
	sentAt atomic.Int64
}

func (f *entryFile) release() {
	if f.refs.Add(-1) == 0 {
		syscall.Close(f.fd)
	}
}

// dropFile gives up e's open file (evicted, replaced, dropped, or its slot
// reused). d.mu is held.
func (e *diskEntry) dropFile() {
	if e.file != nil {
		e.file.release()
		e.file = nil
	}
}

// diskEntry is the index's record of one entry.
type diskEntry struct {
	name    string     // of the data file in dir (hex SHA-256 of the key)
	bytes   int64      // length of the data file
	etag    string     // of the bytes: open hands the file out for this object only
	good    bool       // written or checked by this process
	touched time.Time  // the .json's modification time, as last set (restart recency)
	file    *entryFile // open data file, or nil
}

// touchEvery bounds how often a hit served by open updates its entry's
// .json modification time (the recency a restart rebuilds the index by).
const touchEvery = time.Minute

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
	df, err := os.Open(dir)
	if err != nil {
		return nil, diskLoad{}, fmt.Errorf("edgecache: disk tier: %w", err)
	}
	d := &diskTier{dir: dir, dirFile: df, dirFD: int(df.Fd()), log: log, onEvict: onEvict}
	d.c = s4lru.New(s4lru.Config[*diskEntry]{
		CapacityBytes: capacity,
		Segments:      1,
		OnEvict: func(key string, e *diskEntry, _ int64) {
			e.dropFile()
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
		m    diskMeta
		name string
		mod  time.Time
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
			keep = append(keep, found{m, base, info.ModTime()})
		default:
			if !names[name+".json"] {
				drop(name)
			}
		}
	}
	slices.SortFunc(keep, func(a, b found) int { return a.mod.Compare(b.mod) })
	for _, f := range keep {
		if d.c.Add(f.m.Key, &diskEntry{name: f.name, bytes: f.m.Bytes, etag: f.m.ETag, touched: f.mod}, f.m.Bytes+128) {
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
	e, ok := d.c.Get(key)
	if !ok {
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
		e.dropFile()
		d.c.Remove(key)
		d.removeFiles(key)
		return nil, false
	}
	e.good = true
	d.touch(e, time.Now())
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
	name := d.name(key)
	p := filepath.Join(d.dir, name)
	if err := errors.Join(writeFile(p, o.data), writeFile(p+".json", mb)); err != nil {
		d.removeFiles(key)
		return fmt.Errorf("edgecache: disk tier write: %w", err)
	}
	if old, ok := d.c.Peek(key); ok {
		old.dropFile() // its file was replaced
	}
	e := &diskEntry{name: name, bytes: m.Bytes, etag: o.etag, good: true, touched: time.Now()}
	if !d.c.Add(key, e, m.Bytes+128) {
		d.removeFiles(key)
	}
	return nil
}

// touch sets e's .json modification time to now (recency for the next
// restart). d.mu is held.
func (d *diskTier) touch(e *diskEntry, now time.Time) {
	e.touched = now
	os.Chtimes(filepath.Join(d.dir, e.name+".json"), now, now)
}

// open returns key's data file, open (for sendfile; the caller releases
// it; now is the hit's time), when it holds o's bytes (same length and ETag) and the entry is
// known good; ok is false otherwise (not on disk, not yet checked since a
// restart, evicted meanwhile). The entry keeps the file open for its next
// hits (at most maxOpenFiles entries do). A hit counts as recency, in the
// index and at most every touchEvery on the .json. A data file is never
// rewritten in place (entries are renamed into place and deleted), so an
// open file keeps the bytes it had even if the entry is evicted or
// replaced while it is sent.
func (d *diskTier) open(key string, o *object, now time.Time) (*entryFile, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.c.Get(key)
	if !ok || !e.good || e.bytes != int64(len(o.data)) || e.etag != o.etag {
		return nil, false
	}
	if now.Sub(e.touched) >= touchEvery {
		d.touch(e, now)
	}
	if e.file == nil {
		fd, err := syscall.Openat(d.dirFD, e.name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, false
		}
		f := &entryFile{fd: fd}
		if d.closed {
			f.refs.Store(1) // the caller's only
			d.opened.Add(1)
			return f, true
		}
		f.refs.Store(1) // the entry's
		e.file = f
		if len(d.fds) < maxOpenFiles {
			d.fds = append(d.fds, e)
		} else {
			d.fds[d.next].dropFile()
			d.fds[d.next] = e
			d.next = (d.next + 1) % maxOpenFiles
		}
	}
	e.file.refs.Add(1)
	d.opened.Add(1)
	return e.file, true
}

// close gives up the open files (each closed once the hits sending it
// are done); open keeps none from now on.
func (d *diskTier) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, e := range d.fds {
		e.dropFile()
	}
	d.fds = nil
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
