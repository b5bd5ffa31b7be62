package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"willow/internal/iostat"
)

// Chunk-handling errors; the server edge maps them to gRPC statuses.
var (
	errGap       = errors.New("chunk starts beyond the durable end")
	errRange     = errors.New("chunk outside the declared size")
	errMismatch  = errors.New("chunk differs from bytes already received at that offset")
	errCommitted = errors.New("upload already committed")
	errTooBig    = errors.New("chunk over the maximum chunk size")
)

// stageMeta is what Begin declared; it is written once, atomically.
type stageMeta struct {
	UploadID    string    `json:"upload_id"`
	User        string    `json:"user"`
	Business    string    `json:"business"`
	Kind        int32     `json:"kind"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type,omitempty"`
	Filename    string    `json:"filename,omitempty"`
	Deferred    bool      `json:"deferred,omitempty"`
	Created     time.Time `json:"created"`
}

// commitMarker remembers a committed upload in its staging dir.
type commitMarker struct {
	MediaID  string    `json:"media_id"`
	Location string    `json:"location"`
	At       time.Time `json:"at"`
}

// Staging file names inside one upload's directory.
const (
	fileMeta      = "meta.json"
	fileData      = "data"
	fileOffset    = "offset"
	fileCommitted = "committed.json"
	slotSize      = 512
)

// staged is one upload being received. Chunks are accepted in order: the
// bytes [0, written) are contiguous, hashed as they arrive, and the bytes
// [0, durable) are fsynced with their offset and hash state recorded in
// the offset file (two alternating checksummed slots, so a torn write of
// one leaves the other). On open the data file is cut back to the durable
// offset: bytes written but not synced before a crash are never trusted.
//
// The syncs that Write starts every SyncEvery bytes run in the background
// (one at a time, pipelined with the receive loop): the fsync, the offset
// record and the mirror to the store happen while the next bytes are
// received, and durable moves only once all three are done. Sync, which
// the caller runs before it reports an offset, waits for a background
// sync and makes everything written durable itself.
type staged struct {
	dir  string
	meta stageMeta

	// syncMu is held by whoever syncs (a background sync or Sync) and
	// by whoever replaces or closes the data file; it is taken before mu,
	// never while holding mu.
	syncMu sync.Mutex
	// metaDurable: the metadata file and the staging dir's entries were
	// fsynced by this process (a dir opened again is synced once more).
	// Guarded by syncMu.
	metaDurable bool
	seq         uint64 // guarded by syncMu
	// mirror, when set, copies every newly durable range to the region's
	// store (resume.go); guarded by syncMu.
	mirror *mirror

	mu        sync.Mutex // guards everything below
	f         *os.File
	written   int64
	durable   int64
	sinceSync int64
	h         hash.Hash
	committed *commitMarker
	// headerOK: the image header was read and passed the pixel check.
	headerOK bool
	// flushing: a background sync started by Write has not ended.
	flushing bool
	// stopFlush cancels the running background sync's mirror write (a
	// commit does not wait for a copy it is about to delete).
	stopFlush context.CancelFunc
	// flushErr: the last background sync failed (or found the upload
	// taken over); the next Write or Sync returns it once.
	flushErr error
	// gen changes when the staged bytes are dropped (Reset, commit,
	// close): a background sync started before does nothing.
	gen uint64
}

func writeFileSync(path string, b []byte) error { return writeFile(path, b, true) }

// writeFile writes path atomically (temp file and rename), fsyncing file
// and directory when sync is set.
func writeFile(path string, b []byte, sync bool) error {
	if err := writeTemp(path, b, sync); err != nil {
		return err
	}
	return renameTemp(path, sync)
}

// writeTempSync writes b to path+".tmp" and fsyncs it: writeFileSync's
// first half, publishTemp is the second.
func writeTempSync(path string, b []byte) error { return writeTemp(path, b, true) }

// publishTemp renames path+".tmp" (written by writeTempSync) to path and
// fsyncs the directory: path is then durable.
func publishTemp(path string) error { return renameTemp(path, true) }

func writeTemp(path string, b []byte, sync bool) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	iostat.Wrote(len(b))
	if err == nil && sync {
		err = iostat.Sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// renameTemp renames path+".tmp" to path (removing it if that fails), and
// fsyncs the directory when sync is set.
func renameTemp(path string, sync bool) error {
	if err := os.Rename(path+".tmp", path); err != nil {
		_ = os.Remove(path + ".tmp")
		return err
	}
	if !sync {
		return nil
	}
	return iostat.SyncDir(filepath.Dir(path))
}

// createStaged makes a new staging dir for meta. The metadata is written
// (atomically) but not fsynced: nothing is acknowledged for an upload
// before its first sync, which makes the metadata and the directory
// durable before the offset it records is (syncTo). A crash before
// that leaves no dir, one at offset 0, or one with unreadable metadata,
// which scanStaging removes.
func createStaged(dir string, meta stageMeta) (*staged, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, fileMeta), b, false); err != nil {
		return nil, err
	}
	return openStaged(dir)
}

// readStageMeta reads an upload's declared metadata.
func readStageMeta(dir string) (stageMeta, error) {
	var m stageMeta
	b, err := os.ReadFile(filepath.Join(dir, fileMeta))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("staging %s: %w", dir, err)
	}
	return m, nil
}

// openStaged opens an existing staging dir, recovering the durable offset.
func openStaged(dir string) (*staged, error) {
	meta, err := readStageMeta(dir)
	if err != nil {
		return nil, err
	}
	s := &staged{dir: dir, meta: meta, h: sha256.New()}
	if b, err := os.ReadFile(filepath.Join(dir, fileCommitted)); err == nil {
		var c commitMarker
		if json.Unmarshal(b, &c) == nil && c.MediaID != "" {
			s.committed = &c
			return s, nil
		}
	}
	off, hs, seq := readOffset(filepath.Join(dir, fileOffset))
	if off > 0 {
		if err := s.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(hs); err != nil {
			off, seq = 0, 0
			s.h = sha256.New()
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, fileData), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.Size() < off {
		// The offset record claims more than the file holds: trust nothing.
		off, seq = 0, 0
		s.h = sha256.New()
	}
	if f, err = truncateOwn(f, off); err != nil {
		f.Close()
		return nil, err
	}
	s.f, s.written, s.durable, s.seq = f, off, off, seq
	return s, nil
}

// truncateOwn cuts the staging data file f back to n bytes. A data file
// the store adopted by hard link (store.FileAdopter) is the raw object too:
// it is never cut in place, the staging name gets a private copy of its
// first n bytes instead, and the returned file replaces f (closed). On
// error f is returned unchanged and still open.
func truncateOwn(f *os.File, n int64) (*os.File, error) {
	st, err := f.Stat()
	if err != nil {
		return f, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Nlink <= 1 {
		return f, f.Truncate(n)
	}
	path := f.Name()
	tmp := path + ".tmp"
	nf, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return f, fmt.Errorf("detach staged %s: %w", path, err)
	}
	_, err = io.Copy(nf, io.NewSectionReader(f, 0, n))
	if err == nil {
		err = nf.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		nf.Close()
		_ = os.Remove(tmp)
		return f, fmt.Errorf("detach staged %s: %w", path, err)
	}
	f.Close()
	return nf, nil
}

// readOffset returns the newest valid slot of an offset file.
func readOffset(path string) (off int64, hashState []byte, seq uint64) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, 0
	}
	for i := 0; i+slotSize <= len(b) && i < 2*slotSize; i += slotSize {
		slot := b[i : i+slotSize]
		n := int(binary.BigEndian.Uint16(slot[16:18]))
		if 18+n+4 > slotSize {
			continue
		}
		if crc32.ChecksumIEEE(slot[:18+n]) != binary.BigEndian.Uint32(slot[18+n:]) {
			continue
		}
		if s := binary.BigEndian.Uint64(slot[0:8]); s >= seq && (s > 0) {
			seq, off = s, int64(binary.BigEndian.Uint64(slot[8:16]))
			hashState = append([]byte(nil), slot[18:18+n]...)
		}
	}
	return off, hashState, seq
}

// Committed returns the commit marker, or nil.
func (s *staged) Committed() *commitMarker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// Offsets returns the written and durable offsets.
func (s *staged) Offsets() (written, durable int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.durable
}

// Write applies one chunk at off. Bytes already received must match
// (duplicates are accepted); a chunk starting past the written end is a
// gap. It fsyncs when SyncEvery bytes accumulated (syncEvery > 0).
func (s *staged) Write(off int64, data []byte, syncEvery int64) error {
	return s.WriteSegs(off, [][]byte{data}, syncEvery)
}

// WriteSegs is Write for a chunk given as consecutive segments (a chunk
// decoded in place from its frames), written with one vectored write.
func (s *staged) WriteSegs(off int64, segs [][]byte, syncEvery int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed != nil {
		return errCommitted
	}
	n := segsLen(segs)
	if n > MaxChunkBytes {
		return errTooBig
	}
	end := off + int64(n)
	if off < 0 || end > s.meta.Size {
		return fmt.Errorf("%w: [%d, %d) of %d", errRange, off, end, s.meta.Size)
	}
	if off > s.written {
		return fmt.Errorf("%w: offset %d, have %d", errGap, off, s.written)
	}
	if overlap := min(s.written, end) - off; overlap > 0 {
		// A resent range: rare, so gathered.
		data := bytes.Join(segs, nil)
		have := make([]byte, overlap)
		if _, err := s.f.ReadAt(have, off); err != nil {
			return fmt.Errorf("read staged: %w", err)
		}
		if !bytes.Equal(have, data[:overlap]) {
			return fmt.Errorf("%w: offset %d", errMismatch, off)
		}
		segs, n = [][]byte{data[overlap:]}, n-int(overlap)
	}
	if n == 0 {
		return nil
	}
	if err := s.writeHashLocked(segs, n); err != nil {
		return err
	}
	s.written += int64(n)
	s.sinceSync += int64(n)
	if syncEvery > 0 && s.sinceSync >= syncEvery && !s.flushing {
		return s.startFlushLocked()
	}
	return nil
}

// parallelHashBytes is the chunk size from which Write hashes a chunk on
// another goroutine while it writes it (the two passes over the bytes run
// on two cores instead of one after the other) and starts the chunk's
// writeback to disk at once (startWriteback), so that the fsync before an
// acknowledgement has little left to write.
const parallelHashBytes = 64 << 10

// writeHashLocked appends segs (n bytes) at written and adds them to the
// hash; on a write error the file is cut back and the hash is as before.
// The caller holds mu.
func (s *staged) writeHashLocked(segs [][]byte, n int) error {
	if n < parallelHashBytes {
		if err := writeSegsAt(s.f, segs, s.written); err != nil {
			// Cut back what may have been written; the hash has not seen it.
			_ = s.f.Truncate(s.written)
			return fmt.Errorf("write staged: %w", err)
		}
		iostat.Wrote(n)
		for _, b := range segs {
			s.h.Write(b)
		}
		return nil
	}
	before, err := s.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	hashed := make(chan struct{})
	go func() {
		for _, b := range segs {
			s.h.Write(b)
		}
		close(hashed)
	}()
	werr := writeSegsAt(s.f, segs, s.written)
	if werr == nil {
		startWriteback(s.f, s.written, int64(n))
	}
	<-hashed
	if werr != nil {
		// Cut back what may have been written, and the hash to before it.
		_ = s.f.Truncate(s.written)
		_ = s.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(before) // its own state: cannot fail
		return fmt.Errorf("write staged: %w", werr)
	}
	iostat.Wrote(n)
	return nil
}

func segsLen(segs [][]byte) int {
	n := 0
	for _, b := range segs {
		n += len(b)
	}
	return n
}

// syncPoint is what one sync makes durable: the bytes [0, to) of f and
// the hash state after them.
type syncPoint struct {
	f   *os.File
	to  int64
	hs  []byte
	gen uint64
}

func (s *staged) syncPointLocked() (syncPoint, error) {
	hs, err := s.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return syncPoint{}, err
	}
	s.sinceSync = 0
	return syncPoint{f: s.f, to: s.written, hs: hs, gen: s.gen}, nil
}

// startFlushLocked starts a background sync of [0, written): the receive
// loop goes on while it runs. Its error comes back from the next Write or
// Sync.
func (s *staged) startFlushLocked() error {
	if err := s.takeFlushErrLocked(); err != nil {
		return err
	}
	p, err := s.syncPointLocked()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.flushing, s.stopFlush = true, cancel
	go func() {
		defer cancel()
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
		err := s.syncTo(ctx, p, true)
		// Before syncMu is released: the Sync waiting for this one sees
		// its error.
		s.mu.Lock()
		defer s.mu.Unlock()
		s.flushing, s.stopFlush = false, nil
		if err != nil && p.gen == s.gen {
			s.flushErr = err
		}
	}()
	return nil
}

func (s *staged) takeFlushErrLocked() error {
	err := s.flushErr
	s.flushErr = nil
	return err
}

// stopMirror cancels the copy of a running background sync to the store
// (its fsync, offset record and ownership check still complete); for a
// commit, which removes the mirrored copy anyway.
func (s *staged) stopMirror() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopFlush != nil {
		s.stopFlush()
	}
}

// Sync makes [0, written) durable (after a background sync, if one runs)
// and returns the durable offset. Once every byte is in, a background
// sync's copy to the store is abandoned (its fsync is not): the commit
// follows, and the last range is never mirrored either.
func (s *staged) Sync() (int64, error) {
	if written, _ := s.Offsets(); written == s.meta.Size {
		s.stopMirror()
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	if s.committed != nil {
		s.mu.Unlock()
		return s.meta.Size, nil
	}
	err := s.takeFlushErrLocked()
	var p syncPoint
	if err == nil {
		p, err = s.syncPointLocked()
	}
	durable := s.durable
	s.mu.Unlock()
	if err != nil {
		return durable, err
	}
	err = s.syncTo(context.Background(), p, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable, err
}

// syncMetaLocked makes the metadata file, the staging dir's entries (meta,
// data, offset) and the dir's own entry durable, once per open. The
// caller holds syncMu.
func (s *staged) syncMetaLocked() error {
	if s.metaDurable {
		return nil
	}
	f, err := os.Open(filepath.Join(s.dir, fileMeta))
	if err != nil {
		return fmt.Errorf("sync staged meta: %w", err)
	}
	err = iostat.Sync(f)
	f.Close()
	if err == nil {
		err = iostat.SyncDir(s.dir)
	}
	if err == nil {
		err = iostat.SyncDir(filepath.Dir(s.dir))
	}
	if err != nil {
		return fmt.Errorf("sync staged meta: %w", err)
	}
	s.metaDurable = true
	return nil
}

// syncTo makes p durable: the data file's fsync, the offset record with
// p's hash state, the metadata (first time), then the mirror of the new
// range; durable becomes p.to after all of them. The caller holds syncMu
// (not mu). ctx stops only the mirror; point: a SyncEvery point inside a
// stream (mirror.durable).
func (s *staged) syncTo(ctx context.Context, p syncPoint, point bool) error {
	s.mu.Lock()
	stale := p.gen != s.gen || s.f == nil
	durable := s.durable
	s.mu.Unlock()
	if stale {
		return nil
	}
	if p.to <= durable {
		return s.syncMetaLocked()
	}
	if err := iostat.Sync(p.f); err != nil {
		return fmt.Errorf("sync staged: %w", err)
	}
	slot := make([]byte, slotSize)
	s.seq++
	binary.BigEndian.PutUint64(slot[0:8], s.seq)
	binary.BigEndian.PutUint64(slot[8:16], uint64(p.to))
	binary.BigEndian.PutUint16(slot[16:18], uint16(len(p.hs)))
	copy(slot[18:], p.hs)
	binary.BigEndian.PutUint32(slot[18+len(p.hs):], crc32.ChecksumIEEE(slot[:18+len(p.hs)]))
	of, err := os.OpenFile(filepath.Join(s.dir, fileOffset), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = of.WriteAt(slot, int64(s.seq%2)*slotSize)
	iostat.Wrote(len(slot))
	if err == nil {
		err = iostat.Sync(of)
	}
	if cerr := of.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record offset: %w", err)
	}
	// The offset file is new on the first sync: its entry, and the
	// metadata it depends on, are made durable before the offset is
	// reported (a crash before leaves an offset without metadata, and
	// scanStaging removes the dir: nothing was acknowledged).
	if err := s.syncMetaLocked(); err != nil {
		return err
	}
	var merr error
	if s.mirror != nil {
		merr = s.mirror.durable(ctx, p.f, p.to, p.hs, point)
	}
	s.mu.Lock()
	if p.gen == s.gen && p.to > s.durable {
		s.durable = p.to
	}
	s.mu.Unlock()
	return merr
}

// Sum returns the hex SHA-256 of the bytes received so far.
func (s *staged) Sum() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%x", s.h.Sum(nil))
}

// hashSoFar returns a copy of the hash of the bytes received so far.
func (s *staged) hashSoFar() (hash.Hash, error) {
	s.mu.Lock()
	hs, err := s.h.(encoding.BinaryMarshaler).MarshalBinary()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	return h, h.(encoding.BinaryUnmarshaler).UnmarshalBinary(hs)
}

// Reader returns a reader of the staged bytes [0, n).
func (s *staged) Reader() (io.ReaderAt, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f, s.written
}

// Reset drops every received byte (after a SHA-256 mismatch), so the
// client can send the upload again under the same ID.
func (s *staged) Reset() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if err := os.Remove(filepath.Join(s.dir, fileOffset)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := truncateOwn(s.f, 0)
	s.f = f
	if err != nil {
		return err
	}
	s.written, s.durable, s.sinceSync, s.seq = 0, 0, 0, 0
	s.h = sha256.New()
	if s.mirror != nil {
		s.mirror.reset()
	}
	return nil
}

// MarkCommitted records the commit and frees the staged bytes. The marker
// is not fsynced: it only speeds up duplicate detection, the record in the
// store or pool is the proof of the commit.
func (s *staged) MarkCommitted(c commitMarker) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(s.dir, fileCommitted), b, false); err != nil {
		return err
	}
	s.committed = &c
	s.gen++
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	_ = os.Remove(filepath.Join(s.dir, fileData))
	_ = os.Remove(filepath.Join(s.dir, fileOffset))
	return nil
}

// Close closes the data file.
func (s *staged) Close() error {
	s.stopMirror()
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	s.gen++
	err := s.f.Close()
	s.f = nil
	return err
}

// headerBytes is how much of an image the pixel check wants before it runs
// during the chunk stream (less when the file is smaller).
const headerBytes = 64 << 10

// CheckHeaderOnce runs check on the received bytes once enough of an
// image has arrived, and remembers a pass. It returns check's error.
func (s *staged) CheckHeaderOnce(check func(r io.ReaderAt, n int64) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerOK || s.committed != nil || s.f == nil || s.written < min(s.meta.Size, headerBytes) {
		return nil
	}
	if err := check(s.f, s.written); err != nil {
		return err
	}
	s.headerOK = true
	return nil
}
