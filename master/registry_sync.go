package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
)

// The registry reload is incremental. Every write of a node's entry or
// health judgement (a heartbeat batch, Register, the leader's health
// writes) is a script that also increments the registry's change
// sequence (key nodes:seq) and scores the node's ID with the new value
// in a sorted set (key nodes:changed; one member a node, so it holds at
// most one per node). A master reads the IDs scored above the sequence
// it last read and loads only those entries: at N = 5000 nodes a reload
// reads about the 1250 entries that changed in the last 250 ms instead
// of all 10 000 keys, four times a second (BenchmarkFleet).
//
// A full load (every ID in the index, as before) still runs at start,
// every regFullEvery, and whenever the sequence is missing or went back
// (Redis was flushed or restarted without its data): it finds the
// entries that expired, which signal nothing, and any write a master
// without change tracking made.

// regFullEvery is how often the registry is loaded whole.
const regFullEvery = 10 * time.Second

func (s *Server) regSeqKey() string     { return s.key("nodes:seq") }
func (s *Server) regChangedKey() string { return s.key("nodes:changed") }

// regState is this master's copy of the shared registry: the decoded
// entries with the raw Redis values they came from (a value seen again
// is not decoded again), by ID, and how far the change log was read.
type regState struct {
	mu     sync.Mutex // one load at a time; guards the fields below
	m      map[string]decoded
	ids    []string  // the keys of m, sorted
	seq    int64     // change sequence read up to; 0: none (load whole)
	fullAt time.Time // the last full load
	gen    uint64    // loads made: each view gets the next
	// members counts the changes of ids (a node in or out): a view with
	// the same count as an earlier one holds the same nodes.
	members uint64
	// Refresh's housekeeping (registry.go), atomics outside mu: the
	// members of the view this master's heartbeat state last followed,
	// and when the node gauges were last set (unix ms).
	forgotAt   atomic.Uint64
	observedMs atomic.Int64

	// own is the entries this master's heartbeat batches wrote, by ID,
	// with the change sequence each write got: a load that finds an ID
	// changed at exactly that sequence takes the entry from here instead
	// of reading and decoding it from Redis (a single master at N = 5000
	// read back and decoded its own 5000 heartbeats a second, ~1250
	// records a reload). Its own lock (heartbeat batches must not wait
	// for a load, which holds mu across Redis calls).
	ownMu sync.Mutex
	own   map[string]ownWrite
}

// ownWrite is one entry this master wrote, the change sequence it got,
// and the node's change before it.
type ownWrite struct {
	seq, prev int64
	e         *entry // health unset: the entry's judgement is not in the write
}

// noteOwn records the entries of batch that the heartbeat script wrote
// ("ok") at change sequence seq, prev[i] being batch[i]'s change before.
func (r *regState) noteOwn(batch []*hbCall, seq int64, prev []int64) {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	if r.own == nil {
		r.own = map[string]ownWrite{}
	}
	for i, c := range batch {
		if c.res == "ok" && c.written != nil && prev[i] >= 0 {
			r.own[c.id] = ownWrite{seq: seq, prev: prev[i], e: c.written}
		}
	}
}

// takeOwn returns this master's own writes of the members of z that
// are all that changed of them since change sequence read (this copy's):
// each scored with the write's sequence (nothing after it) and its
// change before it read already (nothing between, such as the leader's
// health judgement, which the write does not hold). It drops the writes
// z shows are not newer than what it lists.
func (r *regState) takeOwn(z []redis.Z, read int64) map[string]*entry {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	var out map[string]*entry
	for _, m := range z {
		id, _ := m.Member.(string)
		w, ok := r.own[id]
		if !ok {
			continue
		}
		if score := int64(m.Score); w.seq == score {
			if w.prev <= read {
				if out == nil {
					out = make(map[string]*entry, len(z))
				}
				out[id] = w.e
			}
			delete(r.own, id)
		} else if w.seq < score {
			delete(r.own, id) // written since by another master or the leader
		}
	}
	return out
}

// dropOwn drops this master's own writes up to change sequence seq (a
// whole load read them from Redis).
func (r *regState) dropOwn(seq int64) {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	for id, w := range r.own {
		if w.seq <= seq {
			delete(r.own, id)
		}
	}
}

type decoded struct {
	rec, health string
	info        []byte // the NodeInfo proto in rec
	e           *entry
}

// readView loads the registry: the entries that changed since the last
// load, or every entry when a full load is due.
func (s *Server) readView(ctx context.Context) (*view, error) {
	r := &s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	now := s.now()
	if r.seq == 0 || r.m == nil || now.Sub(r.fullAt) >= regFullEvery || now.Before(r.fullAt) {
		return s.readFull(ctx, now)
	}
	return s.readChanged(ctx, now)
}

// view returns the entries of r in ID order (r.mu held).
func (r *regState) view(at time.Time) *view {
	r.gen++
	v := &view{at: at, gen: r.gen, members: r.members, entries: make([]*entry, 0, len(r.ids))}
	for _, id := range r.ids {
		v.entries = append(v.entries, r.m[id].e)
	}
	return v
}

// withSeq reads the change sequence (0 when the key is missing) and
// queues the commands of more in the same pipeline; their results are
// for the caller to check.
func (s *Server) withSeq(ctx context.Context, more func(redis.Pipeliner)) (int64, error) {
	var seqCmd *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		seqCmd = p.Get(ctx, s.regSeqKey())
		more(p)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	v, err := seqCmd.Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// readFull loads every entry of the node index (r.mu held).
func (s *Server) readFull(ctx context.Context, now time.Time) (*view, error) {
	r := &s.reg
	var idsCmd *redis.StringSliceCmd
	// The sequence first: a change after it is read again next time.
	seq, err := s.withSeq(ctx, func(p redis.Pipeliner) { idsCmd = p.SMembers(ctx, s.key("nodes")) })
	if err != nil {
		return nil, fmt.Errorf("master: load registry: %w", err)
	}
	ids, err := idsCmd.Result()
	if err != nil {
		return nil, fmt.Errorf("master: load registry: %w", err)
	}
	slices.Sort(ids)
	keep := make(map[string]decoded, len(ids))
	var gone []any
	if len(ids) > 0 {
		vals, err := s.mgetEntries(ctx, ids)
		if err != nil {
			return nil, err
		}
		for i, id := range ids {
			d, ok := s.decodeEntry(id, vals[i], vals[len(ids)+i], r.m[id])
			switch {
			case !ok:
				gone = append(gone, id)
			case d.e != nil:
				keep[id] = d
			}
		}
	}
	r.m, r.seq, r.fullAt = keep, seq, now
	r.dropOwn(seq)
	r.ids = r.ids[:0]
	r.members++
	for _, id := range ids {
		if _, ok := keep[id]; ok {
			r.ids = append(r.ids, id)
		}
	}
	s.prune(ctx, gone)
	return r.view(now), nil
}

// readChanged loads the entries that changed since r.seq (r.mu held).
func (s *Server) readChanged(ctx context.Context, now time.Time) (*view, error) {
	r := &s.reg
	var zCmd *redis.ZSliceCmd
	seq, err := s.withSeq(ctx, func(p redis.Pipeliner) {
		zCmd = p.ZRangeByScoreWithScores(ctx, s.regChangedKey(), &redis.ZRangeBy{
			Min: "(" + strconv.FormatInt(r.seq, 10), Max: "+inf"})
	})
	if err != nil {
		return nil, fmt.Errorf("master: load registry changes: %w", err)
	}
	if seq < r.seq { // Redis lost the sequence (flushed, restarted empty)
		return s.readFull(ctx, now)
	}
	z, err := zCmd.Result()
	if err != nil {
		return nil, fmt.Errorf("master: load registry changes: %w", err)
	}
	if len(z) == 0 {
		return r.view(now), nil
	}
	// The entries this master wrote last come from its own writes;
	// the others (and an own write of an entry not loaded yet, whose
	// health judgement this master has not read) from Redis.
	own := r.takeOwn(z, r.seq)
	ids := make([]string, 0, len(z))
	top := r.seq
	for _, m := range z {
		id, _ := m.Member.(string)
		top = max(top, int64(m.Score))
		if e := own[id]; e != nil {
			if old, had := r.m[id]; had && old.e != nil {
				// e is this load's alone (takeOwn dropped it from own);
				// rec "": a later read decodes it in full.
				e.h = old.e.h
				r.m[id] = decoded{health: old.health, e: e}
				continue
			}
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		r.seq = top
		return r.view(now), nil
	}
	vals, err := s.mgetEntries(ctx, ids)
	if err != nil {
		return nil, err
	}
	var gone []any
	reorder := false
	for i, id := range ids {
		old, had := r.m[id]
		d, ok := s.decodeEntry(id, vals[i], vals[len(ids)+i], old)
		switch {
		case !ok:
			gone = append(gone, id)
			if had {
				delete(r.m, id)
				reorder = true
			}
		case d.e != nil:
			r.m[id] = d
			reorder = reorder || !had
		}
	}
	if reorder {
		r.ids = r.ids[:0]
		r.members++
		for id := range r.m {
			r.ids = append(r.ids, id)
		}
		slices.Sort(r.ids)
	}
	r.seq = top
	s.prune(ctx, gone)
	return r.view(now), nil
}

// mgetEntries reads the entry and health values of ids: the entries
// first, then the healths, in the order of ids.
func (s *Server) mgetEntries(ctx context.Context, ids []string) ([]any, error) {
	keys := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		keys = append(keys, s.nodeKey(id))
	}
	for _, id := range ids {
		keys = append(keys, s.healthKey(id))
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("master: load registry: %w", err)
	}
	return vals, nil
}

// decodeEntry decodes one node's values, reusing old when they did not
// change. ok is false when the entry is gone (expired); a bad entry is
// logged and comes back with a nil e. A heartbeat changes the record's
// load and samples but seldom the node's info or its health judgement:
// those are decoded again only when their bytes changed (each reload
// decodes about N records a second at N nodes: BenchmarkFleet).
func (s *Server) decodeEntry(id string, recVal, healthVal any, old decoded) (d decoded, ok bool) {
	rs, ok := recVal.(string)
	if !ok {
		return decoded{}, false
	}
	hs, _ := healthVal.(string)
	if old.e != nil && old.rec == rs && old.health == hs {
		return old, true
	}
	rb := []byte(rs)
	rec, err := decodeRecord(rb)
	if err != nil {
		s.log.Warn("bad registry entry", "id", id, "err", err)
		return decoded{}, true
	}
	e := &entry{load: &willowv1.Load{}, lastMs: rec.LastMs, samples: rec.Samples}
	if old.e != nil && string(old.info) == string(rec.Info) {
		e.info = old.e.info // read-only once decoded, shared by the entries
	} else {
		e.info = &willowv1.NodeInfo{}
		if err := proto.Unmarshal(rec.Info, e.info); err != nil {
			s.log.Warn("bad registry entry", "id", id, "err", err)
			return decoded{}, true
		}
	}
	_ = proto.Unmarshal(rec.Load, e.load)
	switch {
	case old.e != nil && old.health == hs:
		e.h = old.e.h
	case hs != "":
		_ = json.Unmarshal([]byte(hs), &e.h)
	}
	return decoded{rec: rs, health: hs, info: rec.Info, e: e}, true
}

// prune takes expired nodes out of the index and the change log.
func (s *Server) prune(ctx context.Context, gone []any) {
	if len(gone) == 0 {
		return
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, s.key("nodes"), gone...)
		p.ZRem(ctx, s.regChangedKey(), gone...)
		return nil
	})
	if err != nil {
		s.log.Warn("prune registry", "err", err)
	}
}

// registerScript writes a registering node's entry, adds it to the
// index, creates its health judgement unless it has one, and logs the
// change. KEYS: the index, the change sequence, the change log, the
// entry, the health key; ARGV: the record, the entry TTL (ms), the
// health JSON, the health TTL (ms), the node ID.
var registerScript = redis.NewScript(`
redis.call('set', KEYS[4], ARGV[1], 'PX', ARGV[2])
redis.call('sadd', KEYS[1], ARGV[5])
redis.call('set', KEYS[5], ARGV[3], 'NX', 'PX', ARGV[4])
redis.call('zadd', KEYS[3], redis.call('incr', KEYS[2]), ARGV[5])
return 1`)

// healthScript writes health judgements and logs the change. KEYS[1] is
// the change sequence, KEYS[2] the change log, then the health keys;
// ARGV[1] is the TTL (ms), then per node i ARGV[2i] its health JSON and
// ARGV[2i+1] its ID.
var healthScript = redis.NewScript(`
local v = redis.call('incr', KEYS[1])
for i = 1, #KEYS - 2 do
  redis.call('set', KEYS[2+i], ARGV[2*i], 'PX', ARGV[1])
  redis.call('zadd', KEYS[2], v, ARGV[2*i+1])
end
return 1`)

// writeHealth writes the health judgements in changed.
func (s *Server) writeHealth(ctx context.Context, changed map[string]health) error {
	keys := make([]string, 0, 2+len(changed))
	args := make([]any, 0, 1+2*len(changed))
	keys = append(keys, s.regSeqKey(), s.regChangedKey())
	args = append(args, s.healthTTL().Milliseconds())
	for id, h := range changed {
		b, _ := json.Marshal(h)
		keys = append(keys, s.healthKey(id))
		args = append(args, b, id)
	}
	return healthScript.Run(ctx, s.rdb, keys, args...).Err()
}
