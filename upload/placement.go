package upload

import (
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
// addJob, called with the final record, makes the compress job durable for
// a store or pool-2 upload (pool 1's drain journals it later); its error
// fails the commit (errInternal) without sending the upload elsewhere.
func (s *Server) persist(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64, deferred bool, addJob func(*Record) error) (string, error) {
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
				return jobAdded(LocationPool2, addJob(rec))
			}
		}
	}
	id.Loc = media.LocStore
	rec.ID, rec.Location = id.String(), LocationStore
	serr, jerr := s.toStore(ctx, key, rec, ra, size, addJob)
	if serr == nil {
		return jobAdded(LocationStore, jerr)
	}
	s.log.Warn("upload: store write failed", "key", key, "err", serr)
	if p2 != nil && k.Pool2 != flex.PoolOff {
		if err := s.toPool2(ctx, p2, id, key, rec, ra, size); err == nil {
			s.m.spills.WithLabelValues("pool2", "store_error").Inc()
			return jobAdded(LocationPool2, addJob(rec))
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
// record is the proof of a commit, so never before its raw), with addJob
// running alongside the record write: a job whose record is missing (a
// crash in between; nothing was acknowledged) is dropped by the worker.
// storeErr is the raw's or the record's error, jobErr addJob's.
func (s *Server) toStore(ctx context.Context, key string, rec *Record, ra io.ReaderAt, size int64, addJob func(*Record) error) (storeErr, jobErr error) {
	ctx, cancel := s.storeCtx(ctx)
	defer cancel()
	ct := rec.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	if err := s.putRaw(ctx, key, ra, size, ct); err != nil {
		return err, nil
	}
	job := make(chan error, 1)
	go func() { job <- addJob(rec) }()
	storeErr = writeRecord(ctx, s.st, *rec)
	return storeErr, <-job
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
