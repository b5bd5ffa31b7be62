package upload

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"willow/buffer"
	"willow/flex"
	"willow/internal/iostat"
	"willow/media"
	"willow/store"
)

// findCommitted looks for a committed record of key: the store, then the
// pools. A store error is returned; the caller decides.
func (s *Server) findCommitted(ctx context.Context, key string) (Record, bool, error) {
	for _, n := range []int{1, 2} {
		if p := s.pools[n]; p != nil {
			if e, err := p.Stat(media.RawKey(key)); err == nil {
				var rec Record
				if json.Unmarshal(e.Meta, &rec) == nil && rec.ID != "" {
					return rec, true, nil
				}
			}
		}
	}
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	return readRecord(ctx, s.st, key)
}

// persist makes the raw bytes and the record durable and returns where.
// newJob, called with the final record, is the compress job journaled for
// a store or pool-2 upload (pool 1's drain journals it later); a failed
// journal write fails the commit (errInternal) without sending the upload
// elsewhere.
func (s *Server) persist(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64, deferred bool, newJob func(*Record) job) (string, error) {
	s.placed.Add(1)
	k := s.node.Knobs()
	id := media.ID{Loc: media.LocStore, Region: s.region, Node: s.nodeID, Key: key}
	retiring := s.retiring.Load() // a retiring front spills only when the store fails
	if p := s.pools[1]; p != nil && !retiring && (k.Pool1 == flex.PoolForce || (k.Pool1 == flex.PoolAuto && deferred)) {
		cause := "force"
		if k.Pool1 != flex.PoolForce {
			cause = "shed"
		}
		id.Loc = media.LocPool1
		rec.ID, rec.Location = id.String(), LocationPool1
		if err := s.appendPool(ctx, p, key, rec, ra, size); err != nil {
			s.log.Warn("upload: pool1 append failed; trying the store", "key", key, "err", err)
		} else {
			s.m.spills.WithLabelValues("pool1", cause).Inc()
			return LocationPool1, nil
		}
	}
	p2 := s.pools[2]
	if p2 != nil && k.Pool2 != flex.PoolOff && !retiring {
		cause := ""
		switch {
		case k.Pool2 == flex.PoolForce:
			cause = "force"
		case !s.storeLim.Allow():
			cause = "budget"
		}
		if cause != "" {
			if err := s.toPool2(ctx, p2, id, key, rec, ra, size); err == nil {
				s.m.spills.WithLabelValues("pool2", cause).Inc()
				return jobAdded(LocationPool2, s.journal.Add(ctx, newJob(rec)))
			}
		}
	}
	id.Loc = media.LocStore
	rec.ID, rec.Location = id.String(), LocationStore
	serr, jerr := s.toStore(ctx, key, rec, ra, size, newJob(rec))
	if serr == nil {
		return jobAdded(LocationStore, jerr)
	}
	s.log.Warn("upload: store write failed", "key", key, "err", serr)
	if p2 != nil && k.Pool2 != flex.PoolOff {
		if err := s.toPool2(ctx, p2, id, key, rec, ra, size); err == nil {
			s.m.spills.WithLabelValues("pool2", "store_error").Inc()
			return jobAdded(LocationPool2, s.journal.Add(ctx, newJob(rec)))
		}
	}
	return "", fail(ReasonStoreUnavailable, "raw bytes could not be made durable: %v", serr)
}

func (s *Server) toPool2(ctx context.Context, p *buffer.Pool, id media.ID, key string, rec *Record, ra io.ReaderAt, size int64) error {
	id.Loc = media.LocPool2
	rec.ID, rec.Location = id.String(), LocationPool2
	err := s.appendPool(ctx, p, key, rec, ra, size)
	if err != nil {
		s.log.Warn("upload: pool2 append failed", "key", key, "err", err)
	}
	return err
}

func (s *Server) appendPool(ctx context.Context, p *buffer.Pool, key string, rec *Record, ra io.ReaderAt, size int64) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	return p.Append(ctx, media.RawKey(key), b, io.NewSectionReader(ra, 0, size), size)
}

// jobAdded is persist's answer once the raw and record are durable at loc
// and the compress job was added with error jerr.
func jobAdded(loc string, jerr error) (string, error) {
	if jerr != nil {
		return "", errInternal(jerr)
	}
	return loc, nil
}

// toStore makes the raw and then its record durable in the store (the
// record is the proof of a commit, so never before its raw), with job
// journaled alongside the record write: a job whose record is missing (a
// crash in between; nothing was acknowledged) is dropped by the worker.
// Where the store or the journal can prepare (store.Preparer, the file
// journal), the record's or the job's bytes are made durable alongside
// the raw, under a name no reader sees, and only published (a rename and
// a directory fsync each, run together) once the raw is durable: one
// fsync less after another before the acknowledgement. One that cannot
// writes them after the raw (prepareRecord, prepareAdd). storeErr is the raw's or
// the record's error, jobErr the journal's.
func (s *Server) toStore(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64, j job) (storeErr, jobErr error) {
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	ct := rec.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	recReady := make(chan preparedRecord, 1)
	go func() { recReady <- prepareRecord(ctx, s.st, rec) }()
	type preparedJob struct {
		add   func() error
		abort func()
	}
	jobReady := make(chan preparedJob, 1)
	go func() {
		add, abort := prepareAdd(ctx, s.journal, j)
		jobReady <- preparedJob{add, abort}
	}()
	rawErr := s.putRaw(ctx, key, ra, size, ct)
	pr, pj := <-recReady, <-jobReady
	if rawErr != nil || pr.err != nil {
		pj.abort()
		if pr.err == nil {
			pr.abort()
		}
		return cmp.Or(rawErr, pr.err), nil
	}
	done := make(chan error, 1)
	go func() { done <- pj.add() }()
	storeErr = pr.publish()
	return storeErr, <-done
}

// preparedRecord is a record's write in two steps (store.Preparer):
// publish puts it in place, abort drops it; err is the preparation's.
type preparedRecord struct {
	publish func() error
	abort   func()
	err     error
}

// prepareRecord makes rec's bytes durable under a name no reader sees
// where st can (store.Preparer); for another store, publish writes the
// record (writeRecord) and there is nothing to abort, as prepareAdd does
// for a journal that cannot prepare.
func prepareRecord(ctx context.Context, st store.Store, rec *Record) preparedRecord {
	p, ok := st.(store.Preparer)
	if !ok {
		return preparedRecord{publish: func() error { return writeRecord(ctx, st, *rec) }, abort: func() {}}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return preparedRecord{err: err}
	}
	publish, abort, err := p.Prepare(ctx, media.RecordKey(rec.key()), bytes.NewReader(b), int64(len(b)), "application/json")
	return preparedRecord{publish, abort, err}
}

// putRaw stores the verified staged bytes as the raw object. A store that
// can adopt a local file (store/fs) takes the staging file itself instead
// of a copy of its bytes (the front never writes to a staging file after
// its commit verified it); the file's fsync runs alongside the adoption,
// and putRaw returns once both are done: nothing refers to the raw before
// its record, written after putRaw.
func (s *Server) putRaw(ctx context.Context, key string, ra io.ReaderAt, size int64, ct string) error {
	if a, ok := s.st.(store.FileAdopter); ok {
		if f, ok := ra.(*os.File); ok {
			synced := make(chan error, 1)
			go func() { synced <- iostat.Sync(f) }()
			err := a.AdoptFile(ctx, media.RawKey(key), f.Name(), size, ct)
			if serr := <-synced; err == nil && serr != nil {
				err = fmt.Errorf("sync staged: %w", serr)
			}
			return err
		}
	}
	return s.st.Put(ctx, media.RawKey(key), io.NewSectionReader(ra, 0, size), size, ct)
}
