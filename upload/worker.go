package upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"willow/buffer"
	"willow/flex"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
)

// MaxInlineCompress is the largest pool-2 item compressed from its bytes
// inline (the compress worker's gRPC message limit is 4 MiB); larger pool-2
// items get their variants once drained into the store.
const MaxInlineCompress = 3 << 20

var errNoCompress = errors.New("no compress worker configured")

// Run runs the background work until ctx is done: the compress-retry
// worker, the pool-1 drain, the staging GC and the pool compaction. It returns nil when ctx
// ends.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){s.journalLoop, s.pool1Loop, s.gcLoop, s.compactLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	wg.Wait()
	s.mu.Lock()
	for _, st := range s.uploads {
		st.Close()
	}
	s.mu.Unlock()
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *Server) journalLoop(ctx context.Context) {
	for {
		jobs, err := s.journal.Due(ctx, s.now(), 32)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("upload: journal read", "err", err)
		}
		for _, j := range jobs {
			if ctx.Err() != nil {
				return
			}
			if _, err := s.runJob(ctx, j, nil); err != nil {
				j.Attempts++
				if internalErr(err) {
					j.Internal++
				}
				if j.FirstAt == 0 {
					j.FirstAt = s.now().UnixMilli()
				}
				j.LastErr = err.Error()
				back := s.retryDelay(j.Attempts, err)
				j.NextAt = s.now().Add(back).UnixMilli()
				if aerr := s.journal.Add(ctx, j); aerr != nil {
					s.log.Error("upload: journal reschedule", "key", j.Key, "err", aerr)
				}
				s.log.Info("upload: compress retry scheduled", "media", j.MediaID, "attempts", j.Attempts, "in", back, "err", err)
			}
		}
		if n, err := s.journal.Len(ctx); err == nil {
			s.m.journal.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// callCompress asks a compress worker, within CompressTimeout. With
// queued set it first asks with start_now: a worker with no free slot
// answers not_started at once, queued is called, and the task is asked
// again, to queue (a commit stops waiting for a task that queues).
func (s *Server) callCompress(ctx context.Context, business string, req *willowv1.CompressRequest, queued func()) (*willowv1.CompressResponse, error) {
	if queued != nil {
		req.StartNow = true
		resp, err := s.askCompress(ctx, business, req)
		req.StartNow = false
		if err != nil || !resp.GetNotStarted() {
			return resp, err
		}
		queued()
	}
	return s.askCompress(ctx, business, req)
}

// askCompress is one compress call of callCompress.
func (s *Server) askCompress(ctx context.Context, business string, req *willowv1.CompressRequest) (*willowv1.CompressResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CompressTimeout)
	defer cancel()
	var resp *willowv1.CompressResponse
	var err error
	switch {
	case s.router != nil:
		err = s.router.Call(ctx, "compress", business, func(ctx context.Context, conn *grpc.ClientConn, _ *willowv1.Endpoint) error {
			var e error
			resp, e = willowv1.NewCompressClient(conn).Compress(ctx, req)
			return e
		})
	case s.compress != nil:
		resp, err = s.compress.Compress(ctx, req)
	default:
		err = errNoCompress
	}
	if err != nil {
		s.m.compress.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("compress %s: %w", req.GetMediaId(), err)
	}
	if resp.GetNotStarted() {
		s.m.compress.WithLabelValues("not_started").Inc()
	} else {
		s.m.compress.WithLabelValues("ok").Inc()
	}
	return resp, nil
}

// runJob makes the variants of one media item wherever its raw is now and
// removes the job. It returns the record with its variants when it made
// them, nil when there was nothing to do; an error means retry later.
// queued, when set, is called if the compress task queues for a worker
// (callCompress); the job runs all the same.
func (s *Server) runJob(ctx context.Context, j job, queued func()) (*Record, error) {
	unlock := s.lock(j.Key)
	defer unlock()
	sctx, cancel := s.storeCtx(ctx)
	rec, ok, err := readRecord(sctx, s.st, j.Key)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	if ok {
		if rec.State == StateProcessing {
			resp, err := s.callCompress(ctx, rec.Business, &willowv1.CompressRequest{
				MediaId: rec.ID, Kind: kindOf(rec.Kind), SourceKey: media.RawKey(j.Key), Business: rec.Business}, queued)
			if err != nil {
				return s.compressFailed(ctx, j, rec, err)
			}
			rec.Variants = rec.Variants[:0]
			for _, v := range resp.GetVariants() {
				rec.Variants = append(rec.Variants, variantFromProto(v))
			}
			rec.State = StateReady
			sctx, cancel := s.storeCtx(ctx)
			err = writeRecord(sctx, s.st, rec)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("update record: %w", err)
			}
		}
		return &rec, s.journal.Done(ctx, j.Key)
	}
	if p := s.pools[2]; p != nil {
		if e, err := p.Stat(media.RawKey(j.Key)); err == nil {
			return s.compressPool2(ctx, p, j, e, queued)
		}
	}
	if p := s.pools[1]; p != nil {
		if _, err := p.Stat(media.RawKey(j.Key)); err == nil {
			// The pool-1 drain journals it again once it is in the store.
			return nil, s.journal.Done(ctx, j.Key)
		}
	}
	s.log.Warn("upload: compress job for media found nowhere; dropped", "key", j.Key, "media", j.MediaID)
	return nil, s.journal.Done(ctx, j.Key)
}

// compressPool2 makes the variants of a pool-2 item from its bytes and
// appends them to pool 2, so edge caches can read them at once.
func (s *Server) compressPool2(ctx context.Context, p *buffer.Pool, j job, e buffer.Entry, queued func()) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(e.Meta, &rec); err != nil {
		return nil, fmt.Errorf("pool2 record: %w", err)
	}
	if have := s.poolVariants(j.Key, rec.Kind); len(have) > 0 {
		rec.Variants, rec.State = have, StateReady
		return &rec, s.journal.Done(ctx, j.Key)
	}
	if e.Size > MaxInlineCompress {
		return nil, fmt.Errorf("pool2 item of %d bytes waits for its drain to be compressed", e.Size)
	}
	rc, _, err := p.Get(media.RawKey(j.Key))
	if err != nil {
		return nil, fmt.Errorf("pool2 read: %w", err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("pool2 read: %w", err)
	}
	resp, err := s.callCompress(ctx, rec.Business, &willowv1.CompressRequest{
		MediaId: rec.ID, Kind: kindOf(rec.Kind), Data: raw, ReturnData: true, Business: rec.Business}, queued)
	if err != nil {
		return s.compressFailed(ctx, j, rec, err) // failed: the store record says so and the drain keeps it
	}
	rec.Variants = rec.Variants[:0]
	for _, v := range resp.GetVariants() {
		ve := variantFromProto(v)
		meta, _ := json.Marshal(ve)
		actx, cancel := s.storeCtx(ctx)
		err := p.Append(actx, media.VariantKey(j.Key, v.GetName()), meta, bytes.NewReader(v.GetData()), int64(len(v.GetData())))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("pool2 append variant: %w", err)
		}
		rec.Variants = append(rec.Variants, ve)
	}
	rec.State = StateReady
	return &rec, s.journal.Done(ctx, j.Key)
}

// drainOne moves one pool item (raw and, for pool 2, its variants) into
// the store, writes its store record, and only then deletes it from the
// pool. Every step is idempotent, so a drain repeated after a crash at any
// point neither loses nor duplicates it.
func (s *Server) drainOne(ctx context.Context, n int, key string) error {
	p := s.pools[n]
	unlock := s.lock(key)
	defer unlock()
	rc, e, err := p.Get(media.RawKey(key))
	if errors.Is(err, buffer.ErrNotFound) {
		return nil // drained already
	}
	if err != nil {
		return fmt.Errorf("drain %s: %w", key, err)
	}
	var rec Record
	if err := json.Unmarshal(e.Meta, &rec); err != nil {
		rc.Close()
		return fmt.Errorf("drain %s: record: %w", key, err)
	}
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	ct := rec.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	err = s.st.Put(sctx, media.RawKey(key), rc, e.Size, ct)
	rc.Close()
	if err != nil {
		return fmt.Errorf("drain %s: store raw: %w", key, err)
	}
	var vkeys []string
	rec.Variants = []VariantEntry{}
	if n == 2 {
		for _, name := range variantNames(rec.Kind) {
			vk := media.VariantKey(key, name)
			vr, ve, err := p.Get(vk)
			if errors.Is(err, buffer.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("drain %s: %w", vk, err)
			}
			var v VariantEntry
			_ = json.Unmarshal(ve.Meta, &v)
			err = s.st.Put(sctx, vk, vr, ve.Size, v.ContentType)
			vr.Close()
			if err != nil {
				return fmt.Errorf("drain %s: store: %w", vk, err)
			}
			rec.Variants = append(rec.Variants, v)
			vkeys = append(vkeys, vk)
		}
	}
	rec.Location, rec.DrainedAt, rec.State = LocationStore, s.now().UTC(), StateReady
	if f, failed := s.failedRecord(ctx, key); failed {
		// Compress refused it while in pool 2: it stays failed.
		rec.State, rec.Reason, rec.Error, rec.FailedAt, rec.Attempts = StateFailed, f.Reason, f.Error, f.FailedAt, f.Attempts
	} else if len(rec.Variants) == 0 {
		rec.State = StateProcessing
		if err := s.journal.Add(ctx, job{Key: key, MediaID: rec.ID, Business: rec.Business, NextAt: s.now().UnixMilli()}); err != nil {
			return fmt.Errorf("drain %s: journal: %w", key, err)
		}
	}
	if err := writeRecord(sctx, s.st, rec); err != nil {
		return fmt.Errorf("drain %s: record: %w", key, err)
	}
	for _, vk := range vkeys {
		if err := p.Delete(vk); err != nil && !errors.Is(err, buffer.ErrNotFound) {
			return fmt.Errorf("drain %s: delete: %w", vk, err)
		}
	}
	if err := p.Delete(media.RawKey(key)); err != nil && !errors.Is(err, buffer.ErrNotFound) {
		return fmt.Errorf("drain %s: delete: %w", key, err)
	}
	s.m.drained.WithLabelValues(fmt.Sprint("pool", n)).Inc()
	s.mu.Lock()
	s.drained[n] = append(s.drained[n], s.now())
	if len(s.drained[n]) > 4096 {
		s.drained[n] = s.drained[n][len(s.drained[n])-4096:]
	}
	s.mu.Unlock()
	if rec.State == StateProcessing {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// rawKeys lists the media keys of a pool's items, oldest first.
func rawKeys(p *buffer.Pool) []string {
	var out []string
	for _, e := range p.List() {
		if k, ok := strings.CutPrefix(e.Key, "raw/"); ok {
			out = append(out, k)
		}
	}
	return out
}

// drainAll drains pool n; pool 1 at the pool1_drain_per_s knob.
func (s *Server) drainAll(ctx context.Context, n int) (int64, error) {
	var done int64
	for _, key := range rawKeys(s.pools[n]) {
		if n == 1 && s.retiring.Load() && s.cfg.RetireKeepPool1 {
			return done, nil // retiring with the volume coming back: keep pool 1
		}
		if n == 1 {
			if err := s.waitDrain(ctx); err != nil {
				return done, err
			}
		}
		if err := s.drainOne(ctx, n, key); err != nil {
			return done, err
		}
		done++
	}
	if done > 0 {
		s.compactSoon(n)
	}
	return done, nil
}

func (s *Server) waitDrain(ctx context.Context) error {
	for s.node.Knobs().Pool1DrainPerS <= 0 {
		if !sleep(ctx, s.cfg.PollInterval) {
			return ctx.Err()
		}
	}
	return s.drainLim.Wait(ctx)
}

func (s *Server) pool1Loop(ctx context.Context) {
	if s.pools[1] == nil {
		return
	}
	for ctx.Err() == nil {
		if _, err := s.drainAll(ctx, 1); err != nil && ctx.Err() == nil {
			s.log.Warn("upload: pool1 drain", "err", err)
		}
		if !sleep(ctx, s.cfg.PollInterval) {
			return
		}
	}
}

// gcLoop removes committed staging dirs after CommittedTTL and abandoned
// uploads after StagingTTL.
func (s *Server) gcLoop(ctx context.Context) {
	for {
		s.gc()
		if !sleep(ctx, s.cfg.GCInterval) {
			return
		}
	}
}

func (s *Server) gc() {
	ents, err := os.ReadDir(s.upDir)
	if err != nil {
		return
	}
	now := s.now()
	for _, e := range ents {
		dir := filepath.Join(s.upDir, e.Name())
		meta, err := readStageMeta(dir)
		if err != nil {
			continue
		}
		expired := now.Sub(meta.Created) > s.cfg.StagingTTL
		abandoned := expired
		if b, err := os.ReadFile(filepath.Join(dir, fileCommitted)); err == nil {
			var c commitMarker
			expired = json.Unmarshal(b, &c) == nil && now.Sub(c.At) > s.cfg.CommittedTTL
			abandoned = false
		}
		if !expired {
			continue
		}
		unlock := s.lock(e.Name())
		s.mu.Lock()
		if st := s.uploads[e.Name()]; st != nil {
			st.Close()
		}
		delete(s.uploads, e.Name())
		s.hold.dropStaged(e.Name())
		delete(s.byID[meta.UploadID], e.Name())
		if len(s.byID[meta.UploadID]) == 0 {
			delete(s.byID, meta.UploadID)
		}
		s.mu.Unlock()
		if abandoned {
			s.markExpired(e.Name(), meta.UploadID)
			s.m.uploads.WithLabelValues("expired").Inc()
			s.unmirror(e.Name(), nil)
		}
		s.release(e.Name())
		_ = os.RemoveAll(dir)
		unlock()
	}
	s.gcTombstones(now)
}

// BufferStatus implements willowv1.UploadServer.
func (s *Server) BufferStatus(ctx context.Context, _ *willowv1.BufferStatusRequest) (*willowv1.BufferStatusResponse, error) {
	k := s.node.Knobs()
	resp := &willowv1.BufferStatusResponse{}
	now := s.now()
	for n, mode := range map[int]flex.PoolMode{1: k.Pool1, 2: k.Pool2} {
		ps := &willowv1.PoolStatus{Pool: int32(n), Node: s.nodeID, Mode: string(mode)}
		if p := s.pools[n]; p == nil {
			ps.Mode = string(flex.PoolOff)
		} else {
			st := p.Stats()
			ps.Items = int64(len(rawKeys(p)))
			ps.Bytes = st.Bytes
			ps.DiskBytes, ps.DeadBytes, ps.LiveBytes = st.DiskBytes, st.DeadBytes, st.DiskBytes-st.DeadBytes
			ps.Segments = int32(st.Segments)
			ps.CompactionsTotal = int64(counterValue(s.m.compactions.WithLabelValues(fmt.Sprint("pool", n))))
			if !st.OldestAppendedAt.IsZero() {
				ps.OldestAgeMs = now.Sub(st.OldestAppendedAt).Milliseconds()
			}
		}
		s.mu.Lock()
		var recent int
		for _, t := range s.drained[n] {
			if now.Sub(t) <= 10*time.Second {
				recent++
			}
		}
		s.mu.Unlock()
		ps.DrainPerS = float64(recent) / 10
		ps.DrainedTotal = int64(counterValue(s.m.drained.WithLabelValues(fmt.Sprint("pool", n))))
		resp.Pools = append(resp.Pools, ps)
	}
	if resp.Pools[0].Pool != 1 {
		resp.Pools[0], resp.Pools[1] = resp.Pools[1], resp.Pools[0]
	}
	return resp, nil
}

// Drain implements willowv1.UploadServer: it moves pool N into the store
// (pool 1 at the pool1_drain_per_s knob). With wait it returns when the
// pool is empty (or ctx ends); without, it drains in the background.
func (s *Server) Drain(ctx context.Context, req *willowv1.DrainRequest) (*willowv1.DrainResponse, error) {
	n := int(req.GetPool())
	if n != 1 && n != 2 {
		return nil, fail(ReasonBadPool, "pool must be 1 or 2")
	}
	p := s.pools[n]
	if p == nil {
		return nil, fail(ReasonPoolDisabled, "pool %d is not configured on %s", n, s.nodeID)
	}
	if req.GetWait() {
		ctx, cancel := s.drainCtx(ctx)
		defer cancel()
		done, err := s.drainAll(ctx, n)
		resp := &willowv1.DrainResponse{Drained: done, Remaining: int64(len(rawKeys(p)))}
		if err != nil && ctx.Err() != nil {
			return resp, fail(ReasonDrainDeadline, "drained %d, %d remain: the drain's deadline passed; run it again", done, resp.Remaining)
		}
		if err != nil {
			return resp, fail(ReasonDrainFailed, "drained %d: %v", done, err)
		}
		return resp, nil
	}
	s.mu.Lock()
	running := s.drainRunning[n]
	s.drainRunning[n] = true
	s.mu.Unlock()
	if !running {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if _, err := s.drainAll(ctx, n); err != nil {
				s.log.Warn("upload: background drain", "pool", n, "err", err)
			}
			s.mu.Lock()
			s.drainRunning[n] = false
			s.mu.Unlock()
		}()
	}
	return &willowv1.DrainResponse{Remaining: int64(len(rawKeys(p)))}, nil
}
