package upload

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Resume on any front of the region (docs/upload.md, "Resuming on another
// front").
//
// Every front of a region shares the region's object store. At every
// durable point of an upload (each Config.SyncEvery bytes and the end of
// every stream or HTTP request: the points at which the front reports a
// durable offset) the owning front copies the bytes that became durable
// since the last one to the store as a part object, then rewrites the
// session record that lists the parts:
//
//	staging/KEY/session.json     declared meta, parts, durable offset, owner, epoch
//	staging/KEY/part-OFFSET      one durable range, OFFSET zero-padded
//
// A front asked about an upload it has not staged (Begin, Status, a tus or
// IETF request) reads the session record and adopts the upload: it copies
// the listed parts into a local staging dir (each part checked against
// the SHA-256 of the upload's bytes up to its end, which the owner took
// from its running hash; the parts contiguous from 0; a missing or
// damaged part ends the copy there), writes the record back with itself as owner and the epoch
// incremented, and answers with that durable offset. The client then sends
// only the missing bytes. The staged bytes are verified as before at
// Commit (size, the declared SHA-256), the raw goes to the store or a pool
// only then, and the acknowledgement still follows the raw being durable.
//
// Ownership: the record names one owner. Before every part it writes, and
// at Commit, the owner reads the record back; a front that finds another
// owner (the client moved on while this front was partitioned, not dead)
// has lost the upload: its chunks and Commit answer FAILED_PRECONDITION
// upload_moved, and a Begin or Status on it adopts the upload back. Media
// IDs are a function of (user, upload ID) and the region's store record
// is looked up before every commit, so the same upload ID never makes two
// media.
//
// The mirror is best effort: when the store fails, the front keeps its
// local durability and reports it; another front then resumes from the
// last mirrored offset instead. After the commit, a termination or the
// staging GC, the owner deletes the parts and the record. Parts written by
// a front killed between a part and its record are not listed and are left
// to the bucket's lifecycle rule on staging/ (docs/operations.md).

// DefaultMirrorTimeout bounds one mirror write (part or record).
const DefaultMirrorTimeout = 10 * time.Second

// DefaultMirrorInterval is Config.MirrorInterval's default: a stream
// faster than SyncEvery a second copies only its first point before its
// end, and one
// whose front dies resends at most about a second of bytes more to
// another front than it would with a copy at every SyncEvery point.
const DefaultMirrorInterval = time.Second

var errMoved = errors.New("upload taken over by another front")

const stagingPrefix = "staging/"

func sessionRecordKey(key string) string { return stagingPrefix + key + "/session.json" }

func partObjectKey(key string, off int64) string {
	return fmt.Sprintf("%s%s/part-%016d", stagingPrefix, key, off)
}

// mirrorPart is one durable range in the store. Prefix is the SHA-256 of
// the upload's bytes [0, Off+Len), the sum of the hash state the sync
// recorded with the range, so writing a part costs no pass over its bytes
// for a hash; an adopter, which hashes the parts in order anyway, checks
// it. SHA256, the part's own digest, is what records written before
// Prefix carry; an adopter checks whichever of the two a part has.
type mirrorPart struct {
	Off    int64  `json:"off"`
	Len    int64  `json:"len"`
	SHA256 string `json:"sha256,omitempty"`
	Prefix string `json:"prefix_sha256,omitempty"`
}

// sessionRecord is staging/KEY/session.json.
type sessionRecord struct {
	Meta    stageMeta    `json:"meta"`
	Parts   []mirrorPart `json:"parts"`
	Durable int64        `json:"durable"`
	Owner   string       `json:"owner"`
	Epoch   uint64       `json:"epoch"`
	Updated time.Time    `json:"updated"`
}

// mirror copies one staged upload's durable ranges to the store. Its
// methods are called under the staged upload's syncMu.
type mirror struct {
	s     *Server
	key   string
	meta  stageMeta
	epoch uint64
	parts []mirrorPart
	end   int64 // bytes [0, end) are in the listed parts
	moved bool
	// wrote: a session record of this epoch is in the store (written,
	// adopted or found after a restart); without one no other front can
	// have taken the upload over, and there is nothing to remove.
	wrote bool
	// retryAt: after a store failure, the next sync before it skips the
	// mirror, so a store outage costs a stream one timeout, not one per
	// sync.
	retryAt time.Time
	// lastAt: the last copy, the end of the last stream or request, or
	// the mirror's start; a SyncEvery point copies only once it is
	// Config.MirrorInterval old.
	lastAt time.Time
}

func (s *Server) mirrorCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.MirrorTimeout)
}

func (s *Server) readSessionRecord(ctx context.Context, key string) (sessionRecord, bool, error) {
	return readJSON[sessionRecord](ctx, s.st, sessionRecordKey(key))
}

func (m *mirror) record() sessionRecord {
	return sessionRecord{Meta: m.meta, Parts: m.parts, Durable: m.end, Owner: m.s.nodeID, Epoch: m.epoch, Updated: m.s.now().UTC()}
}

func (m *mirror) writeRecord(ctx context.Context) error {
	if err := writeJSON(ctx, m.s.st, sessionRecordKey(m.key), m.record()); err != nil {
		return err
	}
	m.wrote = true
	return nil
}

// owned reads the record back: errMoved when another front owns it now.
func (m *mirror) owned(ctx context.Context) error {
	rec, ok, err := m.s.readSessionRecord(ctx, m.key)
	if err != nil {
		return err
	}
	if ok && (rec.Owner != m.s.nodeID || rec.Epoch != m.epoch) {
		m.moved = true
		return errMoved
	}
	return nil
}

// durable mirrors [end, to) of f; hs is the hash state after [0, to). It returns errMoved when another front
// owns the upload; store failures are logged, not returned. The last
// range (to is the upload's size) is not mirrored: Commit follows it, and
// a client whose front dies in between resends at most that range to
// another front. So an upload of up to SyncEvery sent in one stream costs
// no mirror writes. A cancelled ctx (a commit under way) abandons the copy
// quietly; the ownership check runs whatever ctx says. point: a SyncEvery
// point inside a stream, which copies only every MirrorInterval (the
// ownership check runs at each one once a record is in the store);
// otherwise the end of a stream or request, which copies what is new. The
// first point of an upload without a record in the store always copies.
func (m *mirror) durable(ctx context.Context, f *os.File, to int64, hs []byte, point bool) error {
	if m.moved {
		return errMoved
	}
	now := m.s.now()
	if to <= m.end || to >= m.meta.Size || now.Before(m.retryAt) {
		return nil
	}
	// Until a record is in the store every point copies, so an upload
	// is resumable on another front as soon as its first SyncEvery is
	// durable, even when its client then stalls with the stream open;
	// after that, a point copies only every MirrorInterval.
	wait := point && m.wrote && now.Sub(m.lastAt) < m.s.cfg.MirrorInterval
	if !point {
		m.lastAt = now
	}
	octx, ocancel := m.s.mirrorCtx()
	err := m.owned(octx)
	ocancel()
	if errors.Is(err, errMoved) || (wait && err == nil) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.s.cfg.MirrorTimeout)
	defer cancel()
	var prefix string
	if err == nil {
		prefix, err = sumOfState(hs)
	}
	if err == nil {
		n := to - m.end
		err = m.s.st.Put(ctx, partObjectKey(m.key, m.end), io.NewSectionReader(f, m.end, n), n, "application/octet-stream")
		if err == nil {
			m.parts = append(m.parts, mirrorPart{Off: m.end, Len: n, Prefix: prefix})
			m.end = to
			if err = m.writeRecord(ctx); err != nil {
				// Not listed, so not trusted: roll the part back.
				m.parts = m.parts[:len(m.parts)-1]
				m.end -= n
			}
		}
	}
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		m.s.m.mirror.WithLabelValues("abandoned").Inc()
		return nil
	}
	if err != nil {
		m.retryAt = m.s.now().Add(m.s.cfg.MirrorTimeout)
		m.s.m.mirror.WithLabelValues("error").Inc()
		m.s.log.Warn("upload: mirroring staged bytes to the store failed; another front would resume from the last mirrored offset",
			"key", m.key, "mirrored", m.end, "durable", to, "err", err)
		return nil
	}
	m.lastAt = m.s.now()
	m.s.m.mirror.WithLabelValues("ok").Inc()
	return nil
}

// sumOfState is the hex SHA-256 of the bytes hashed into the marshalled
// state hs.
func sumOfState(hs []byte) (string, error) {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(hs); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// reset forgets the mirrored parts (the staged bytes were dropped after a
// SHA-256 mismatch); the parts are deleted in the background.
func (m *mirror) reset() {
	old := m.parts
	m.parts, m.end = nil, 0
	ctx, cancel := m.s.mirrorCtx()
	defer cancel()
	if err := m.writeRecord(ctx); err != nil {
		m.s.log.Warn("upload: session record reset", "key", m.key, "err", err)
	}
	go m.s.deleteParts(m.key, old)
}

func (s *Server) deleteParts(key string, parts []mirrorPart) {
	ctx, cancel := s.mirrorCtx()
	defer cancel()
	for _, p := range parts {
		if err := s.st.Delete(ctx, partObjectKey(key, p.Off)); err != nil {
			s.log.Warn("upload: delete mirrored part", "key", key, "off", p.Off, "err", err)
			return
		}
	}
}

// attachMirror starts mirroring st, owned by this front at epoch. claim
// writes the record at once (an adoption); a new upload's record is
// written with its first part.
func (s *Server) attachMirror(key string, st *staged, epoch uint64, parts []mirrorPart, claim bool) error {
	if s.cfg.DisableStagingMirror {
		return nil
	}
	m := &mirror{s: s, key: key, meta: st.meta, epoch: epoch, parts: parts, lastAt: s.now()}
	for _, p := range parts {
		m.end = p.Off + p.Len
	}
	var err error
	if claim {
		ctx, cancel := s.mirrorCtx()
		err = m.writeRecord(ctx)
		cancel()
		if err != nil {
			return err
		}
	}
	st.syncMu.Lock()
	st.mirror = m
	st.syncMu.Unlock()
	return err
}

// unmirror deletes the mirrored parts and record of key when this front
// owns them (after a commit, a termination or expiry). st may be nil.
func (s *Server) unmirror(key string, st *staged) {
	if s.cfg.DisableStagingMirror {
		return
	}
	var epoch uint64
	if st != nil {
		st.syncMu.Lock()
		m := st.mirror
		wrote := m != nil && m.wrote
		if m != nil {
			epoch = m.epoch
		}
		st.syncMu.Unlock()
		if m != nil && !wrote {
			return // never in the store
		}
	}
	ctx, cancel := s.mirrorCtx()
	defer cancel()
	rec, ok, err := s.readSessionRecord(ctx, key)
	if err != nil || !ok || rec.Owner != s.nodeID || (epoch != 0 && rec.Epoch != epoch) {
		return // not ours (another front adopted it), or nothing there
	}
	s.deleteParts(key, rec.Parts)
	if err := s.st.Delete(ctx, sessionRecordKey(key)); err != nil {
		s.log.Warn("upload: delete session record", "key", key, "err", err)
	}
}

// localOrAdopted returns the upload key staged on this front, adopting it
// from the region's store when another front staged it (or taking it back
// when another front took it over from this one). Callers do not hold
// key's lock. It returns nil when no front of the region knows the
// upload.
func (s *Server) localOrAdopted(ctx context.Context, key string) (*staged, error) {
	st, err := s.staged(key)
	if err != nil || s.cfg.DisableStagingMirror {
		return st, err
	}
	if st != nil && st.Committed() != nil {
		return st, nil
	}
	unlock := s.lock(key)
	defer unlock()
	if st, err = s.staged(key); err != nil || (st != nil && st.Committed() != nil) {
		return st, err
	}
	sctx, cancel := s.mirrorCtx()
	rec, ok, err := s.readSessionRecord(sctx, key)
	cancel()
	if err != nil {
		// The store is down: what is staged here (if anything) is all
		// there is to resume from, unless another front took it over.
		s.log.Warn("upload: session record unreadable", "key", key, "err", err)
		if st != nil && st.isMoved() {
			s.forgetLocked(key, st.meta.UploadID)
			return nil, nil
		}
		return st, nil
	}
	if st != nil {
		if own := st.ownMirror(s, key, ok, rec); own {
			return st, nil
		}
		// Another front took the upload over: what is staged here is
		// stale. Drop it (not the store's copy) and adopt the current one.
		s.forgetLocked(key, st.meta.UploadID)
	}
	if !ok {
		return nil, nil
	}
	if s.now().After(rec.Meta.Created.Add(s.cfg.StagingTTL)) {
		return nil, nil // expired; its owner's GC removes it
	}
	if _, done, err := s.findCommitted(ctx, key); err == nil && done {
		// Committed on its owner, which has not removed the copy yet:
		// the caller answers with the media.
		return nil, nil
	}
	return s.adoptLocked(ctx, key, rec)
}

// adoptLocked copies the parts of rec into a new local staging dir and
// makes this front the owner. The caller holds key's lock.
func (s *Server) adoptLocked(ctx context.Context, key string, rec sessionRecord) (*staged, error) {
	start := s.now()
	dir := filepath.Join(s.upDir, key)
	_ = os.RemoveAll(dir)
	st, err := createStaged(dir, rec.Meta)
	if err != nil {
		return nil, err
	}
	var parts []mirrorPart
	var off int64
	for _, p := range rec.Parts {
		if p.Off != off || p.Len <= 0 {
			break
		}
		if err := s.copyPart(ctx, key, st, p); err != nil {
			s.log.Warn("upload: adopt: part unusable; resuming before it", "key", key, "off", p.Off, "err", err)
			break
		}
		parts = append(parts, p)
		off += p.Len
	}
	if _, err := st.Sync(); err != nil {
		st.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := s.attachMirror(key, st, rec.Epoch+1, parts, true); err != nil {
		// Could not claim it: leave the owner as it was.
		st.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("adopt %s: claim: %w", key, err)
	}
	s.mu.Lock()
	s.uploads[key] = st
	s.indexLocked(rec.Meta.UploadID, key)
	s.mu.Unlock()
	s.reserve(key, rec.Meta.Size)
	s.m.adopted.Inc()
	s.log.Info("upload: adopted an upload staged on another front", "key", key, "from", rec.Owner,
		"epoch", rec.Epoch+1, "offset", off, "took", s.now().Sub(start))
	return st, nil
}

// copyPart appends part p (checked against its SHA-256, or st's bytes so
// far and p together against its Prefix) to st.
func (s *Server) copyPart(ctx context.Context, key string, st *staged, p mirrorPart) error {
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	rc, info, err := s.st.Get(sctx, partObjectKey(key, p.Off))
	if err != nil {
		return err
	}
	defer rc.Close()
	if info.Size >= 0 && info.Size != p.Len {
		return fmt.Errorf("part is %d bytes, record says %d", info.Size, p.Len)
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	h := sha256.New()
	if p.SHA256 == "" {
		// The parts are copied in order from 0: st holds [0, p.Off).
		if h, err = st.hashSoFar(); err != nil {
			return err
		}
	}
	// Spool and check the whole part before any of it is staged.
	tmp, err := os.CreateTemp(s.upDir, ".part-*")
	if err != nil {
		return err
	}
	defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), io.LimitReader(rc, p.Len+1), *buf)
	if err != nil {
		return err
	}
	if n != p.Len || hex.EncodeToString(h.Sum(nil)) != cmp.Or(p.SHA256, p.Prefix) {
		return fmt.Errorf("part damaged (%d bytes, sha256 %x)", n, h.Sum(nil))
	}
	for pos := int64(0); pos < n; {
		k := min(int64(MaxChunkBytes), n-pos)
		if _, err := tmp.ReadAt((*buf)[:k], pos); err != nil {
			return err
		}
		if err := st.Write(p.Off+pos, (*buf)[:k], 0); err != nil {
			return err
		}
		pos += k
	}
	return nil
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, MaxChunkBytes); return &b }}

// ownMirror decides, for localOrAdopted, whether st (staged here) is
// still this front's copy of key given the session record rec (ok: there
// is one), attaching a mirror when st has none yet. false: another front
// took the upload over and st is stale.
func (st *staged) ownMirror(s *Server, key string, ok bool, rec sessionRecord) bool {
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	m := st.mirror
	switch {
	case m != nil && m.moved:
		// Taken over before: stale, whatever the store says now.
	case !ok:
		if m == nil {
			// Staged before a restart, never mirrored or its record
			// removed: mirror it from now on.
			st.mirror = &mirror{s: s, key: key, meta: st.meta, epoch: 1, lastAt: s.now()}
		}
		return true
	case rec.Owner == s.nodeID && (m == nil || m.epoch == rec.Epoch):
		if m == nil {
			// This front restarted: carry on with its own record.
			st.mirror = &mirror{s: s, key: key, meta: st.meta, epoch: rec.Epoch, parts: rec.Parts, end: rec.Durable, wrote: true, lastAt: s.now()}
		}
		return true
	}
	return false
}

// isMoved reports whether another front took st over.
func (st *staged) isMoved() bool {
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	return st.mirror != nil && st.mirror.moved
}

// checkOwner is Commit's ownership check: FAILED_PRECONDITION
// upload_moved when another front took the upload over.
func (s *Server) checkOwner(st *staged) error {
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	if st.mirror == nil || (!st.mirror.wrote && !st.mirror.moved) {
		return nil // no record: no other front can have adopted it
	}
	ctx, cancel := s.mirrorCtx()
	defer cancel()
	if err := st.mirror.owned(ctx); errors.Is(err, errMoved) {
		return movedErr(st.mirror.key)
	}
	return nil
}

func movedErr(key string) error {
	return fail(ReasonUploadMoved,
		"upload %s was taken over by another front of the region; continue there (Begin or Status answers its offset)", key)
}
