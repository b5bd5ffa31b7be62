package edgecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sync/semaphore"

	"github.com/prometheus/client_golang/prometheus"

	"willow/media"
	"willow/shedding"
	"willow/store"
)

// Objects larger than Config.SliceBytes are filled and cached in slices,
// as nginx's slice module does: the head entry (base key) holds the size
// and headers, slice i (key base#i) bytes [i*S, (i+1)*S). A request reads
// only the slices its range covers, each filled once per node
// (singleflight) from the owner peer or origin with a ranged read, so the
// first byte waits for one slice and a fill holds at most one slice in
// memory. Fills hold Config.FillBudgetBytes among them (fillBudget).

func sliceKey(base string, i int64) string { return base + "#" + strconv.FormatInt(i, 10) }

// fillBudget bounds the bytes all fills of a node hold in memory at once;
// a fill over it waits for earlier fills to finish, until its deadline.
type fillBudget struct {
	sem   *semaphore.Weighted
	total int64
	inUse prometheus.Gauge
}

func newFillBudget(total int64, inUse prometheus.Gauge) *fillBudget {
	return &fillBudget{sem: semaphore.NewWeighted(total), total: total, inUse: inUse}
}

// acquire takes n bytes (at least 1, at most the whole budget) and returns
// the function that gives them back. Errors: ctx's, wrapped in ErrOrigin.
func (b *fillBudget) acquire(ctx context.Context, n int64) (func(), error) {
	n = min(max(n, 1), b.total)
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("%w: waiting for fill memory: %w", ErrOrigin, err)
	}
	b.inUse.Add(float64(n))
	return func() {
		b.inUse.Sub(float64(n))
		b.sem.Release(n)
	}, nil
}

// slice returns slice i of the sliced object whose head is h.
func (s *Server) slice(ctx context.Context, r req, h *object, i int64) (*object, error) {
	owner, owned := s.owner(r)
	key := sliceKey(r.base(), i)
	o, _, err := s.resolve(ctx, key, owned, func(ctx context.Context) (found, error) {
		return s.fillSlice(ctx, r, h, i, owner, owned)
	})
	return o, err
}

// fillSlice reads slice i from the owner peer or with a ranged read from
// the store.
func (s *Server) fillSlice(ctx context.Context, r req, h *object, i int64, owner string, owned bool) (found, error) {
	off := i * s.cfg.SliceBytes
	n := min(s.cfg.SliceBytes, h.size-off)
	key := sliceKey(r.base(), i)
	if !owned && !s.peerDown(owner) {
		p, err := s.fetchPeer(shedding.WithRequest(ctx, r.who.business, r.who.user), owner, r, "", off, n)
		if err == nil && (p.size != h.size || p.etag != h.etag || int64(len(p.data)) != n) {
			err = fmt.Errorf("owner answered %d of %d bytes, ETag %s, for slice %d of %s (size %d, ETag %s)",
				len(p.data), p.size, p.etag, i, r.base(), h.size, h.etag)
		}
		switch {
		case err == nil:
			o := &object{data: p.data, size: n}
			s.keep(key, o, false)
			return found{o, tierPeer}, nil
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrBadRequest):
			return found{}, err
		}
		s.log.Warn("owner peer failed, reading origin", "owner", owner, "key", key, "err", err)
		s.markDown(owner)
	}
	var data []byte
	var poolErr error // pool 2 could not be read: its front is down or failed
	if r.id.Loc == media.LocPool2 {
		p, err := s.readPool(ctx, r.id, r.variant, off, n)
		switch {
		case err == nil && (p.size != h.size || int64(len(p.data)) != n):
			err = fmt.Errorf("pool 2 answered %d of %d bytes for slice %d of %s (size %d)", len(p.data), p.size, i, key, h.size)
		case err == nil:
			s.m.originFetches.WithLabelValues("pool2", "ok").Inc()
			data = p.data
		case errors.Is(err, errPoolGone):
			s.m.originFetches.WithLabelValues("pool2", "not_found").Inc()
		}
		if err != nil && !errors.Is(err, errPoolGone) {
			poolErr = err
			s.m.originFetches.WithLabelValues("pool2", "error").Inc()
			s.log.Warn("pool 2 read failed, reading the store", "key", key, "err", err)
		}
	}
	if data == nil {
		var err error
		if data, err = s.readStoreRange(ctx, r, h, off, n); err != nil {
			if poolErr != nil && errors.Is(err, ErrNotFound) {
				// Not drained yet, and the front holding it is down.
				return found{}, fmt.Errorf("%w: slice %d of %s is in pool 2 of %s, which cannot be read (%w), and not in the store yet",
					ErrOrigin, i, key, r.id.Node, poolErr)
			}
			return found{}, err
		}
	}
	o := &object{data: data, size: n}
	s.keep(key, o, owned)
	return found{o, tierOrigin}, nil
}

// readStoreRange reads bytes [off, off+n) of a sliced object from the
// store, retried like fetchOrigin while the retries knob is on.
func (s *Server) readStoreRange(ctx context.Context, r req, h *object, off, n int64) ([]byte, error) {
	rg, ok := s.store.(store.RangeGetter)
	if !ok {
		return nil, fmt.Errorf("%w: the store has no ranged reads", ErrOrigin)
	}
	tries := 1
	if s.node.Knobs().Retries {
		tries = 3
	}
	key := storeKey(r.id, r.variant)
	var last error
	for range tries {
		data, err := func() ([]byte, error) {
			ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
			defer cancel()
			release, err := s.budget.acquire(ctx, n)
			if err != nil {
				return nil, err
			}
			defer release()
			rc, info, err := rg.GetRange(ctx, key, off, n)
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			if info.Size != h.size {
				return nil, fmt.Errorf("%s changed size: %d, was %d", key, info.Size, h.size)
			}
			buf := make([]byte, n)
			k, err := io.ReadFull(rc, buf)
			s.m.originBytes.Add(float64(k))
			if err != nil {
				return nil, fmt.Errorf("read %s at %d: %w", key, off, err)
			}
			return buf, nil
		}()
		if err == nil {
			s.m.originFetches.WithLabelValues("store", "ok").Inc()
			return data, nil
		}
		if errors.Is(err, store.ErrNotFound) {
			s.m.originFetches.WithLabelValues("store", "not_found").Inc()
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		s.m.originFetches.WithLabelValues("store", "error").Inc()
		last = err
	}
	return nil, fmt.Errorf("%w: store: %w", ErrOrigin, last)
}

// open returns a reader of the whole representation o of r: the cached
// bytes, or, for a head, its slices, each fetched when the reader reaches
// it (and the next one ahead of it while the reader will go below end).
// Reads fail with the slice fill's error; ctx bounds them.
func (s *Server) open(ctx context.Context, r req, o *object, end int64) io.ReadSeeker {
	if !o.sliced {
		return bytes.NewReader(o.data)
	}
	return &sliceReader{ctx: ctx, s: s, r: r, h: o, end: min(end, o.size)}
}

// rangeEnd returns the end (exclusive) of the bytes a Range header asks
// for from an object of size bytes: the largest end of its ranges, or size
// when it has none or cannot be parsed (ServeContent then decides).
func rangeEnd(h string, size int64) int64 {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return size
	}
	end := int64(0)
	for _, r := range strings.Split(spec, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(r), "-")
		if !ok {
			return size
		}
		if a == "" || b == "" { // a suffix or an open range: to the end
			return size
		}
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			return size
		}
		end = max(end, n+1)
	}
	return min(end, size)
}

// sliceReader reads a sliced object slice by slice.
type sliceReader struct {
	ctx context.Context
	s   *Server
	r   req
	h   *object
	pos int64
	end int64   // prefetch below this
	cur *object // the slice holding pos, or nil
	idx int64   // cur's index
}

func (sr *sliceReader) Read(p []byte) (int, error) {
	if sr.pos >= sr.h.size {
		return 0, io.EOF
	}
	S := sr.s.cfg.SliceBytes
	i := sr.pos / S
	if sr.cur == nil || sr.idx != i {
		o, err := sr.s.slice(sr.ctx, sr.r, sr.h, i)
		if err != nil {
			return 0, err
		}
		sr.cur, sr.idx = o, i
		if next := (i + 1) * S; next < sr.end {
			// One slice ahead, when the request will read it, so a
			// streaming client does not wait for each slice's round trip;
			// a repeated prefetch is one fill.
			go sr.s.slice(sr.ctx, sr.r, sr.h, i+1)
		}
	}
	n := copy(p, sr.cur.data[sr.pos-i*S:])
	sr.pos += int64(n)
	return n, nil
}

func (sr *sliceReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += sr.pos
	case io.SeekEnd:
		off += sr.h.size
	default:
		return 0, errors.New("bad whence")
	}
	if off < 0 {
		return 0, errors.New("negative position")
	}
	sr.pos = off
	return off, nil
}
