package buffer

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"willow/internal/ctxio"
	"willow/internal/iostat"
)

// SyncPolicy says when appended records are forced to stable storage.
type SyncPolicy int

const (
	// SyncEveryAppend fsyncs the segment file before Append or Delete
	// returns, and the directory whenever a segment file is created or
	// removed. It is the zero value and the default.
	SyncEveryAppend SyncPolicy = iota
	// SyncNone leaves writes in the OS page cache: an acknowledged record
	// survives the death of the process (kill -9) but not a power loss or
	// kernel crash. Segments are still fsynced when they are sealed and on
	// Close.
	SyncNone
)

// Defaults.
const (
	DefaultMaxSegmentBytes int64 = 256 << 20
	DefaultName                  = "default"

	segmentExt = ".seg"
	lockName   = "LOCK"
	// smallBlob is the size up to which Get reads and verifies a blob into
	// memory in one pass; larger blobs are verified in a first pass and
	// streamed (and verified again) in a second.
	smallBlob = 4 << 20
	copyBuf   = 256 << 10
)

// Errors. Returned errors wrap these; test with errors.Is.
var (
	// ErrNotFound: the key is not live in the pool.
	ErrNotFound = errors.New("buffer: not found")
	// ErrCorrupt: the stored blob no longer matches its checksum.
	ErrCorrupt = errors.New("buffer: corrupt blob")
	// ErrSizeMismatch: Append's reader gave more or fewer bytes than size.
	ErrSizeMismatch = errors.New("buffer: size mismatch")
	// ErrClosed: the pool has been closed.
	ErrClosed = errors.New("buffer: pool closed")
)

// Options configures a Pool. The zero value is valid and means the defaults
// named on each field.
type Options struct {
	// MaxSegmentBytes: once the active segment file would grow past it, the
	// next record starts a new segment. A single larger record gets a
	// segment of its own. Default DefaultMaxSegmentBytes (256 MiB).
	MaxSegmentBytes int64
	// Sync is the fsync policy; default SyncEveryAppend.
	Sync SyncPolicy
	// Now is the clock for AppendedAt and the oldest-item age; default
	// time.Now.
	Now func() time.Time
	// Registerer receives the pool's metrics, labelled pool=Name; optional.
	// Close unregisters them.
	Registerer prometheus.Registerer
	// Name labels the metrics and log lines, e.g. "pool1"; default
	// DefaultName.
	Name string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Entry describes a live blob.
type Entry struct {
	Key        string
	Size       int64
	Meta       []byte
	AppendedAt time.Time
}

// Stats is a snapshot of a pool's contents.
type Stats struct {
	// Items and Bytes count live blobs and their blob bytes.
	Items int
	Bytes int64
	// OldestAppendedAt is the AppendedAt of the oldest live blob; zero when
	// the pool is empty.
	OldestAppendedAt time.Time
	// Segments is the number of segment files.
	Segments int
	// DeadBytes is the on-disk bytes held by deleted blobs, tombstones and
	// unreadable records, which Compact can give back.
	DeadBytes int64
	// DiskBytes is the size of all segment files; DiskBytes - DeadBytes
	// are the live records (headers, keys and meta included).
	DiskBytes int64
}

// Pool is an append-only blob store in one directory. It is safe for
// concurrent use: appends and deletes are serialized, reads run
// concurrently with them and with Compact.
type Pool struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File
	m    *metrics

	wmu    sync.Mutex // serializes Append, Delete, Compact, Close; guards the fields below
	active *segment
	nextID uint64
	broken error // set when a failed write could not be undone; appends refuse
	buf    []byte

	mu       sync.RWMutex // guards the fields below and segment.size/live/targets
	closed   bool
	index    map[string]*record
	order    *list.List // of *record in append order
	segs     []*segment // all segment files, by id
	live     int64      // blob bytes of live records
	liveRecs int64      // on-disk bytes of live records
	segBytes int64      // sum of segment sizes
}

type record struct {
	key        string
	meta       []byte
	seg        *segment
	off        int64 // record start
	dataOff    int64
	size       int64
	recLen     int64
	crc        uint32
	appendedAt int64
	elem       *list.Element
	// stale lists older segments that still hold superseded copies of
	// this key (left by Compact moving it); a tombstone for the key must
	// outlive them all.
	stale []uint64
}

func (r *record) entry() Entry {
	return Entry{Key: r.key, Size: r.size, Meta: slices.Clone(r.meta), AppendedAt: time.Unix(0, r.appendedAt)}
}

type segment struct {
	id      uint64
	path    string
	f       *os.File
	size    int64               // end of the last valid record; guarded by Pool.mu
	live    int                 // live records in this segment; guarded by Pool.mu
	liveLen int64               // on-disk bytes of those records; guarded by Pool.mu
	targets map[uint64]struct{} // segments whose records this one's tombstones delete; guarded by Pool.mu
	refs    atomic.Int64        // the pool's reference plus open readers
	pinned  bool                // Compact could not empty it; guarded by Pool.wmu
}

func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		_ = s.f.Close()
	}
}

func segmentName(id uint64) string { return fmt.Sprintf("%020d%s", id, segmentExt) }

// Open opens the pool in dir, creating the directory if needed. It takes an
// exclusive lock on the directory (a second Open fails until Close), replays
// every segment to rebuild the index, and truncates a segment at its first
// record that is torn or fails its header checksum. In the newest segment,
// the only one a crash can leave half-written, blob checksums are verified
// too: a record whose blob fails is dropped (truncated if it is the last).
func Open(dir string, opts Options) (*Pool, error) {
	if opts.MaxSegmentBytes <= 0 {
		opts.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Sync != SyncEveryAppend && opts.Sync != SyncNone {
		return nil, fmt.Errorf("buffer %s: unknown sync policy %d", opts.Name, opts.Sync)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Pool{
		dir:   dir,
		opts:  opts,
		log:   log.With("pool", opts.Name),
		index: make(map[string]*record),
		order: list.New(),
		buf:   make([]byte, copyBuf),
	}
	p.m = newMetrics(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("buffer %s: open: %w", opts.Name, err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("buffer %s: open: %w", opts.Name, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("buffer %s: open: %s is in use: %w", opts.Name, dir, err)
	}
	p.lock = lf
	if err := p.recover(); err != nil {
		p.closeFiles()
		return nil, fmt.Errorf("buffer %s: open: %w", opts.Name, err)
	}
	if err := p.m.register(opts.Registerer, opts.Name); err != nil {
		p.closeFiles()
		return nil, fmt.Errorf("buffer %s: open: %w", opts.Name, err)
	}
	return p, nil
}

func (p *Pool) recover() error {
	des, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	var ids []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), segmentExt)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil || segmentName(id) != de.Name() {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if err := p.load(id, i == len(ids)-1); err != nil {
			return err
		}
		p.nextID = id + 1
	}
	if len(p.segs) > 0 {
		p.active = p.segs[len(p.segs)-1]
	}
	// Records Compact moved replay in their new place; List is by age.
	recs := make([]*record, 0, p.order.Len())
	for e := p.order.Front(); e != nil; e = e.Next() {
		recs = append(recs, e.Value.(*record))
	}
	byAge := func(a, b *record) int { return cmp.Compare(a.appendedAt, b.appendedAt) }
	if !slices.IsSortedFunc(recs, byAge) {
		slices.SortStableFunc(recs, byAge)
		p.order.Init()
		for _, r := range recs {
			r.elem = p.order.PushBack(r)
		}
	}
	if p.nextID == 0 {
		p.nextID = 1
	}
	return nil
}

// load replays one segment file into the index.
func (p *Pool) load(id uint64, newest bool) error {
	path := filepath.Join(p.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	seg := &segment{id: id, path: path, f: f, targets: map[uint64]struct{}{}}
	seg.refs.Store(1)
	p.segs = append(p.segs, seg)
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	fsize := fi.Size()
	var (
		off    int64
		hb     = make([]byte, headerSize)
		reason string
	)
	for off < fsize {
		if fsize-off < headerSize {
			reason = "short header"
			break
		}
		if _, err := f.ReadAt(hb, off); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		h, err := decodeHeader(hb)
		if err != nil {
			reason = err.Error()
			break
		}
		kmEnd := off + recordLen(int(h.keyLen), int(h.metaLen), 0)
		if kmEnd > fsize || h.blobLen > uint64(fsize-kmEnd) {
			reason = "record runs past end of file"
			break
		}
		km := make([]byte, int(h.keyLen)+int(h.metaLen))
		if _, err := f.ReadAt(km, off+headerSize); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if headChecksum(hb[:32], km[:h.keyLen], km[h.keyLen:]) != h.headCRC {
			reason = "header checksum mismatch"
			break
		}
		end := kmEnd + int64(h.blobLen)
		key := string(km[:h.keyLen])
		rec := &record{
			key: key, seg: seg, off: off, dataOff: kmEnd, size: int64(h.blobLen),
			recLen: end - off, crc: h.blobCRC, appendedAt: h.appendedAt,
		}
		if h.metaLen > 0 {
			rec.meta = km[h.keyLen:]
		}
		if newest && h.flags&flagTombstone == 0 {
			ok, err := verifyBlob(f, rec.dataOff, rec.size, rec.crc, p.buf)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if !ok && end == fsize {
				reason = "blob checksum mismatch at tail"
				break
			}
			if !ok {
				p.m.corrupt.Inc()
				p.log.Warn("buffer: dropping record with corrupt blob", "segment", path, "offset", off, "key", key)
				seg.size = end
				p.segBytes += rec.recLen
				off = end
				continue
			}
		}
		seg.size = end
		p.segBytes += rec.recLen
		if h.flags&flagTombstone != 0 {
			p.applyTombstone(seg, key)
		} else {
			p.applyPut(rec)
		}
		off = end
	}
	if off < fsize {
		p.m.corrupt.Inc()
		p.log.Warn("buffer: truncating segment tail", "segment", path, "offset", off, "dropped_bytes", fsize-off, "reason", reason)
		if err := f.Truncate(off); err != nil {
			return fmt.Errorf("truncate %s: %w", path, err)
		}
		if err := iostat.Sync(f); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	return nil
}

func verifyBlob(f *os.File, off, size int64, want uint32, buf []byte) (bool, error) {
	c := crc32.New(castagnoli)
	if _, err := io.CopyBuffer(c, io.NewSectionReader(f, off, size), buf); err != nil {
		return false, err
	}
	return c.Sum32() == want, nil
}

// applyPut makes rec the live record for its key. Callers hold p.mu (or
// own p exclusively during recovery).
func (p *Pool) applyPut(rec *record) {
	if old, ok := p.index[rec.key]; ok {
		// Only replay sees a second put of a live key: a copy Compact
		// made, superseding the one in old.seg.
		rec.stale = append(slices.Clone(old.stale), old.seg.id)
		p.unlink(old)
	}
	rec.elem = p.order.PushBack(rec)
	p.link(rec)
}

func (p *Pool) link(rec *record) {
	p.index[rec.key] = rec
	rec.seg.live++
	rec.seg.liveLen += rec.recLen
	p.live += rec.size
	p.liveRecs += rec.recLen
}

// applyTombstone deletes key by a tombstone stored in seg.
func (p *Pool) applyTombstone(seg *segment, key string) {
	old, ok := p.index[key]
	if !ok {
		return
	}
	for _, id := range append(old.stale, old.seg.id) {
		if id != seg.id {
			seg.targets[id] = struct{}{}
		}
	}
	p.unlink(old)
}

func (p *Pool) unlink(r *record) {
	p.order.Remove(r.elem)
	p.unindex(r)
}

func (p *Pool) unindex(r *record) {
	delete(p.index, r.key)
	r.seg.live--
	r.seg.liveLen -= r.recLen
	p.live -= r.size
	p.liveRecs -= r.recLen
}

// segmentFor returns the segment the next record of length n goes to,
// sealing the active one and starting a new one when n does not fit.
// Callers hold p.wmu.
func (p *Pool) segmentFor(n int64) (*segment, error) {
	if a := p.active; a != nil {
		p.mu.RLock()
		size := a.size
		p.mu.RUnlock()
		if size == 0 || size+n <= p.opts.MaxSegmentBytes {
			return a, nil
		}
		// Seal: whatever the policy, a sealed segment is on disk before
		// any record lands in the next one, so only the newest segment
		// can ever hold a torn record.
		if err := iostat.Sync(a.f); err != nil {
			return nil, fmt.Errorf("seal segment: %w", err)
		}
	}
	id := p.nextID
	path := filepath.Join(p.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("new segment: %w", err)
	}
	if err := iostat.SyncDir(p.dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("new segment: %w", err)
	}
	p.nextID++
	seg := &segment{id: id, path: path, f: f, targets: map[uint64]struct{}{}}
	seg.refs.Store(1)
	p.mu.Lock()
	p.segs = append(p.segs, seg)
	p.mu.Unlock()
	p.active = seg
	return seg, nil
}

// writable reports why appends are refused, if they are. Callers hold p.wmu.
func (p *Pool) writable() error {
	p.mu.RLock()
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return p.broken
}

// Append stores size bytes read from r under key, with meta kept alongside.
// When it returns nil the blob is durable per the Sync policy and visible to
// Get, Stat and List. Appending a key that is already live is a no-op that
// returns nil without reading r. If r yields more or fewer than size bytes
// the error wraps ErrSizeMismatch; on any error nothing becomes visible and
// the bytes written are cut off again. Append holds the pool's write lock
// while it reads r, so r should be a local source (memory, a spool file),
// not a slow client stream.
func (p *Pool) Append(ctx context.Context, key string, meta []byte, r io.Reader, size int64) error {
	if err := p.append(ctx, key, meta, r, size); err != nil {
		return fmt.Errorf("buffer %s: append %q: %w", p.opts.Name, key, err)
	}
	return nil
}

func (p *Pool) append(ctx context.Context, key string, meta []byte, r io.Reader, size int64) error {
	switch {
	case len(key) == 0 || len(key) > MaxKeyLen:
		return fmt.Errorf("key length %d outside 1..%d", len(key), MaxKeyLen)
	case len(meta) > MaxMetaLen:
		return fmt.Errorf("meta length %d over %d", len(meta), MaxMetaLen)
	case size < 0:
		return fmt.Errorf("negative size %d: %w", size, ErrSizeMismatch)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.writable(); err != nil {
		return err
	}
	if p.hasKey(key) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n := recordLen(len(key), len(meta), size)
	seg, err := p.segmentFor(n)
	if err != nil {
		return err
	}
	p.mu.RLock()
	off := seg.size
	p.mu.RUnlock()

	// 1. Zeroed header (an invalid magic), key and meta.
	head := make([]byte, headerSize+len(key)+len(meta))
	copy(head[headerSize:], key)
	copy(head[headerSize+len(key):], meta)
	if _, err := seg.f.WriteAt(head, off); err != nil {
		return p.undo(seg, off, err)
	}
	// 2. The blob, checksummed on the way.
	c := crc32.New(castagnoli)
	src := io.TeeReader(io.LimitReader(ctxio.Reader(ctx, r), size), c)
	dataOff := off + int64(len(head))
	got, err := io.CopyBuffer(io.NewOffsetWriter(seg.f, dataOff), src, p.buf)
	if err != nil {
		return p.undo(seg, off, err)
	}
	if got != size {
		return p.undo(seg, off, fmt.Errorf("read %d bytes, want %d: %w", got, size, ErrSizeMismatch))
	}
	var one [1]byte
	switch k, err := io.ReadAtLeast(ctxio.Reader(ctx, r), one[:], 1); {
	case k > 0:
		return p.undo(seg, off, fmt.Errorf("reader has more than %d bytes: %w", size, ErrSizeMismatch))
	case err != io.EOF:
		return p.undo(seg, off, err)
	}
	// 3. The real header, last: until it is written the record is invalid.
	h := header{
		keyLen: uint16(len(key)), metaLen: uint32(len(meta)), blobLen: uint64(size),
		appendedAt: p.opts.Now().UnixNano(), blobCRC: c.Sum32(),
	}
	h.encode(head, key, meta)
	if _, err := seg.f.WriteAt(head[:headerSize], off); err != nil {
		return p.undo(seg, off, err)
	}
	if p.opts.Sync == SyncEveryAppend {
		if err := iostat.Sync(seg.f); err != nil {
			return p.failSync(seg, off, err)
		}
	}
	rec := &record{
		key: key, meta: slices.Clone(meta), seg: seg, off: off, dataOff: dataOff, size: size,
		recLen: n, crc: h.blobCRC, appendedAt: h.appendedAt,
	}
	if len(meta) == 0 {
		rec.meta = nil
	}
	p.mu.Lock()
	seg.size = off + n
	p.segBytes += n
	p.applyPut(rec)
	p.mu.Unlock()
	p.m.appends.Inc()
	iostat.Wrote(int(n))
	return nil
}

// undo cuts seg back to off after a failed append. If even that fails the
// pool stops taking writes: the next record's position would be unknown.
func (p *Pool) undo(seg *segment, off int64, cause error) error {
	if err := seg.f.Truncate(off); err != nil {
		p.broken = fmt.Errorf("buffer %s: segment %s could not be cut back after a failed write (reopen the pool): %w", p.opts.Name, seg.path, err)
		p.log.Error("buffer: pool disabled", "err", p.broken)
	}
	return cause
}

// failSync handles a failed fsync: the page cache state is unknown after it,
// so the record is cut off and the pool refuses further writes until reopened.
func (p *Pool) failSync(seg *segment, off int64, cause error) error {
	_ = p.undo(seg, off, cause)
	p.broken = fmt.Errorf("buffer %s: fsync failed (reopen the pool): %w", p.opts.Name, cause)
	p.log.Error("buffer: pool disabled", "err", p.broken)
	return fmt.Errorf("fsync: %w", cause)
}

// Get returns the blob stored under key and its entry. The checksum is
// verified before Get returns: a mismatch gives an error wrapping ErrCorrupt
// and no bytes. A missing key gives ErrNotFound. The caller must Close the
// reader; reads stay valid while Compact runs.
func (p *Pool) Get(key string) (io.ReadCloser, Entry, error) {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return nil, Entry{}, fmt.Errorf("buffer %s: get %q: %w", p.opts.Name, key, ErrClosed)
	}
	r, ok := p.index[key]
	if !ok {
		p.mu.RUnlock()
		return nil, Entry{}, fmt.Errorf("buffer %s: get %q: %w", p.opts.Name, key, ErrNotFound)
	}
	seg, e, off, size, want := r.seg, r.entry(), r.dataOff, r.size, r.crc
	seg.refs.Add(1)
	p.mu.RUnlock()

	corrupt := func() error {
		p.log.Error("buffer: corrupt blob", "key", key, "segment", seg.path, "offset", off)
		return fmt.Errorf("buffer %s: get %q: %w", p.opts.Name, key, ErrCorrupt)
	}
	if size <= smallBlob {
		defer seg.release()
		b := make([]byte, size)
		if _, err := seg.f.ReadAt(b, off); err != nil {
			return nil, Entry{}, fmt.Errorf("buffer %s: get %q: %w", p.opts.Name, key, err)
		}
		if crc32.Checksum(b, castagnoli) != want {
			return nil, Entry{}, corrupt()
		}
		return io.NopCloser(bytes.NewReader(b)), e, nil
	}
	ok, err := verifyBlob(seg.f, off, size, want, make([]byte, copyBuf))
	if err != nil || !ok {
		seg.release()
		if err != nil {
			return nil, Entry{}, fmt.Errorf("buffer %s: get %q: %w", p.opts.Name, key, err)
		}
		return nil, Entry{}, corrupt()
	}
	return &blobReader{sr: io.NewSectionReader(seg.f, off, size), crc: crc32.New(castagnoli), want: want, seg: seg}, e, nil
}

// blobReader streams a large verified blob, checking the checksum again as
// it goes in case the file changed after verification.
type blobReader struct {
	sr   *io.SectionReader
	crc  hash.Hash32
	want uint32
	seg  *segment
	once sync.Once
}

func (b *blobReader) Read(buf []byte) (int, error) {
	n, err := b.sr.Read(buf)
	b.crc.Write(buf[:n])
	if err == io.EOF && b.crc.Sum32() != b.want {
		return n, ErrCorrupt
	}
	return n, err
}

func (b *blobReader) Close() error {
	b.once.Do(b.seg.release)
	return nil
}

// hasKey reports whether key is in the index (not deleted).
func (p *Pool) hasKey(key string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.index[key]
	return ok
}

// Stat returns the entry for key, or an error wrapping ErrNotFound.
func (p *Pool) Stat(key string) (Entry, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return Entry{}, fmt.Errorf("buffer %s: stat %q: %w", p.opts.Name, key, ErrClosed)
	}
	r, ok := p.index[key]
	if !ok {
		return Entry{}, fmt.Errorf("buffer %s: stat %q: %w", p.opts.Name, key, ErrNotFound)
	}
	return r.entry(), nil
}

// Delete removes key by appending a tombstone, durable per the Sync policy
// when Delete returns nil. Deleting a key that is not live returns nil.
func (p *Pool) Delete(key string) error {
	if err := p.delete(key); err != nil {
		return fmt.Errorf("buffer %s: delete %q: %w", p.opts.Name, key, err)
	}
	return nil
}

func (p *Pool) delete(key string) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.writable(); err != nil {
		return err
	}
	if !p.hasKey(key) {
		return nil
	}
	n := recordLen(len(key), 0, 0)
	seg, err := p.segmentFor(n)
	if err != nil {
		return err
	}
	p.mu.RLock()
	off := seg.size
	p.mu.RUnlock()
	b := make([]byte, n)
	copy(b[headerSize:], key)
	h := header{flags: flagTombstone, keyLen: uint16(len(key)), appendedAt: p.opts.Now().UnixNano()}
	h.encode(b, key, nil)
	if _, err := seg.f.WriteAt(b, off); err != nil {
		return p.undo(seg, off, err)
	}
	if p.opts.Sync == SyncEveryAppend {
		if err := iostat.Sync(seg.f); err != nil {
			return p.failSync(seg, off, err)
		}
	}
	p.mu.Lock()
	seg.size = off + n
	p.segBytes += n
	p.applyTombstone(seg, key)
	p.mu.Unlock()
	p.m.deletes.Inc()
	iostat.Wrote(int(n))
	return nil
}

// List returns the live entries, oldest first. It returns nil once the pool
// is closed.
func (p *Pool) List() []Entry {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil
	}
	out := make([]Entry, 0, p.order.Len())
	for e := p.order.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*record).entry())
	}
	return out
}

// Stats returns a snapshot of the pool's contents; zero once closed.
func (p *Pool) Stats() Stats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return Stats{}
	}
	s := Stats{
		Items:     p.order.Len(),
		Bytes:     p.live,
		Segments:  len(p.segs),
		DeadBytes: p.segBytes - p.liveRecs,
		DiskBytes: p.segBytes,
	}
	if f := p.order.Front(); f != nil {
		s.OldestAppendedAt = time.Unix(0, f.Value.(*record).appendedAt)
	}
	return s
}

// Compact gives disk space back. Oldest first, it removes every segment
// file that holds no live blob and whose tombstones no longer shadow a
// record in an older segment still on disk, syncing the directory after each
// removal so a crash midway never brings a deleted blob back. A sealed
// segment whose live records fill less than half of it has them copied
// (checksums verified, header and AppendedAt unchanged, fsynced whatever the
// policy) to the active segment first, then is removed the same way; a
// blob that fails its checksum is not copied and keeps its segment. Appends
// and deletes wait while Compact runs; readers, including ones holding a
// removed segment's blob, keep reading.
func (p *Pool) Compact(ctx context.Context) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.writable(); err != nil {
		return fmt.Errorf("buffer %s: compact: %w", p.opts.Name, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("buffer %s: compact: %w", p.opts.Name, err)
		}
		if seg := p.nextDead(); seg != nil {
			if err := p.remove(seg); err != nil {
				return fmt.Errorf("buffer %s: compact: %w", p.opts.Name, err)
			}
			continue
		}
		seg := p.nextSparse()
		if seg == nil {
			return nil
		}
		if err := p.move(ctx, seg); err != nil {
			return fmt.Errorf("buffer %s: compact: %w", p.opts.Name, err)
		}
	}
}

// compactRewriteBelow is the live fraction of a sealed segment under which
// Compact moves its live records out so it can be removed.
const compactRewriteBelow = 0.5

func (p *Pool) remove(seg *segment) error {
	if err := os.Remove(seg.path); err != nil {
		return err
	}
	if err := iostat.SyncDir(p.dir); err != nil {
		return err
	}
	p.mu.Lock()
	p.segs = slices.DeleteFunc(p.segs, func(s *segment) bool { return s == seg })
	p.segBytes -= seg.size
	p.mu.Unlock()
	if seg == p.active {
		p.active = nil
	}
	seg.release()
	return nil
}

// nextSparse returns the oldest sealed segment worth emptying, or nil.
func (p *Pool) nextSparse() *segment {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, s := range p.segs {
		if s != p.active && !s.pinned && s.live > 0 && float64(s.liveLen) < compactRewriteBelow*float64(s.size) {
			return s
		}
	}
	return nil
}

// move copies seg's live records to the active segment and points the index
// at the copies. Callers hold p.wmu, so nothing else changes the index
// meanwhile. Copies written are always indexed, even when a later one
// fails: replay would prefer them anyway, and the index must know the old
// segment holds a stale copy so a later tombstone outlives it.
func (p *Pool) move(ctx context.Context, seg *segment) error {
	p.mu.RLock()
	var recs []*record
	for e := p.order.Front(); e != nil; e = e.Next() {
		if r := e.Value.(*record); r.seg == seg {
			recs = append(recs, r)
		}
	}
	p.mu.RUnlock()
	type moved struct{ old, new *record }
	var (
		done    []moved
		touched []*segment
		err     error
	)
	for _, r := range recs {
		if err = ctx.Err(); err != nil {
			break
		}
		if err = p.broken; err != nil {
			break
		}
		var nr *record
		if nr, err = p.copyRecord(r); err != nil {
			break
		}
		if nr == nil { // corrupt: stays where it is
			seg.pinned = true
			continue
		}
		done = append(done, moved{r, nr})
		if !slices.Contains(touched, nr.seg) {
			touched = append(touched, nr.seg)
		}
	}
	// Copies are on disk before the old segment can be removed, whatever
	// the sync policy.
	for _, s := range touched {
		if serr := iostat.Sync(s.f); serr != nil {
			p.broken = fmt.Errorf("buffer %s: fsync failed (reopen the pool): %w", p.opts.Name, serr)
			err = serr
		}
	}
	p.mu.Lock()
	for _, m := range done {
		m.new.elem = p.order.InsertAfter(m.new, m.old.elem)
		p.unlink(m.old)
		p.link(m.new)
	}
	p.mu.Unlock()
	if len(done) == 0 && err == nil {
		seg.pinned = true // nothing movable: do not try again
	}
	return err
}

// copyRecord appends a verified copy of r to the active segment, returning
// the new record, or nil if r's blob fails its checksum.
func (p *Pool) copyRecord(r *record) (*record, error) {
	dst, err := p.segmentFor(r.recLen)
	if err != nil {
		return nil, err
	}
	p.mu.RLock()
	off := dst.size
	p.mu.RUnlock()
	head := make([]byte, headerSize+len(r.key)+len(r.meta))
	copy(head[headerSize:], r.key)
	copy(head[headerSize+len(r.key):], r.meta)
	if _, err := dst.f.WriteAt(head, off); err != nil {
		return nil, p.undo(dst, off, err)
	}
	c := crc32.New(castagnoli)
	src := io.TeeReader(io.NewSectionReader(r.seg.f, r.dataOff, r.size), c)
	if _, err := io.CopyBuffer(io.NewOffsetWriter(dst.f, off+int64(len(head))), src, p.buf); err != nil {
		return nil, p.undo(dst, off, err)
	}
	if c.Sum32() != r.crc {
		p.log.Error("buffer: corrupt blob not compacted", "key", r.key, "segment", r.seg.path, "offset", r.off)
		return nil, p.undo(dst, off, nil)
	}
	h := header{
		keyLen: uint16(len(r.key)), metaLen: uint32(len(r.meta)), blobLen: uint64(r.size),
		appendedAt: r.appendedAt, blobCRC: r.crc,
	}
	h.encode(head, r.key, r.meta)
	if _, err := dst.f.WriteAt(head[:headerSize], off); err != nil {
		return nil, p.undo(dst, off, err)
	}
	p.mu.Lock()
	dst.size = off + r.recLen
	p.segBytes += r.recLen
	p.mu.Unlock()
	iostat.Wrote(int(r.recLen))
	return &record{
		key: r.key, meta: r.meta, seg: dst, off: off, dataOff: off + int64(len(head)), size: r.size,
		recLen: r.recLen, crc: r.crc, appendedAt: r.appendedAt,
		stale: append(slices.Clone(r.stale), r.seg.id),
	}, nil
}

// nextDead returns the oldest removable segment, or nil.
func (p *Pool) nextDead() *segment {
	p.mu.RLock()
	defer p.mu.RUnlock()
	exists := make(map[uint64]bool, len(p.segs))
	for _, s := range p.segs {
		exists[s.id] = true
	}
	for _, s := range p.segs {
		if s.live > 0 {
			continue
		}
		needed := false
		for t := range s.targets {
			needed = needed || exists[t]
		}
		if !needed {
			return s
		}
	}
	return nil
}

// Close syncs the active segment, releases the directory lock and
// unregisters the metrics. Open readers keep working until closed. Calls
// after the first return nil.
func (p *Pool) Close() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	var err error
	if p.active != nil && p.broken == nil {
		err = iostat.Sync(p.active.f)
	}
	p.m.unregister()
	p.closeFiles()
	if err != nil {
		return fmt.Errorf("buffer %s: close: %w", p.opts.Name, err)
	}
	return nil
}

func (p *Pool) closeFiles() {
	p.mu.Lock()
	for _, s := range p.segs {
		s.release()
	}
	p.segs = nil
	p.mu.Unlock()
	if p.lock != nil {
		p.lock.Close() // releases the flock
	}
}
