package master

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Heartbeats are written to Redis by group commit: the heartbeats that
// arrive while one batch is in flight go out together as the next one, in
// one script call, so the master keeps at most one Redis connection busy
// with heartbeats however many nodes it serves, and a heartbeat costs one
// round trip shared by its batch instead of one of its own. A fleet of
// 1000 nodes queued its heartbeats for the master's whole Redis pool, and
// a flex write behind them timed out (BenchmarkFleet).
//
// The queue is bounded and every step under its lock is O(1) but the
// taking of a batch: at N = 5000 an earlier form (a waiting heartbeat
// took itself out of the queue by scanning it, and each batch copied the
// rest of the queue) held the lock for O(queue) while 180 000 handler
// goroutines queued on it, the master's heap grew to 8 GiB and almost
// every heartbeat missed its deadline (BenchmarkFleet, N=5000). Now a
// heartbeat whose context ends just stops waiting (the writer skips it),
// and a heartbeat that finds hbQueueMax ahead of it does not queue at all:
// Redis is not keeping up, and it is answered as when Redis is away
// (errHBBusy).
//
// A writer goroutine exists only while the queue is not empty: the
// heartbeat that finds none starts one, and it exits when the queue is.

// hbBatchMax bounds one batch (one script call keeps Redis busy for
// about 10 µs per heartbeat).
const hbBatchMax = 512

// hbQueueMax bounds the heartbeats waiting for a batch: two seconds of
// heartbeats of a 4000-node fleet, a few MiB of records.
const hbQueueMax = 8192

// errHBBusy: the heartbeat queue is full (Redis is not keeping up).
var errHBBusy = errors.New("heartbeat queue full: redis is not keeping up")

// hbCall is one heartbeat's write: the node's binding (fp: its
// credential fingerprint, "" without auth) and its encoded record.
type hbCall struct {
	id, fp           string
	nodeKey, bindKey string // s.nodeKey(id), s.bindKey(id)
	rec              []byte
	written          *entry          // rec as an entry (encodeRecord), for regState.noteOwn
	ctx              context.Context // the heartbeat's: ended, the writer skips it
	res              string          // the heartbeat script's answer for this node
	err              error
	done             chan struct{} // closed when res/err are set
}

type hbBatcher struct {
	limit   int // queue bound; 0: hbQueueMax
	mu      sync.Mutex
	queue   []*hbCall
	running bool // a writer goroutine is draining the queue
}

// do writes c with the heartbeats queued with it through write, and
// returns its answer. A call still waiting when ctx ends returns
// ctx.Err() at once (a stalled Redis must not hold heartbeats past their
// deadline); one that finds the queue full returns errHBBusy.
func (b *hbBatcher) do(ctx context.Context, c *hbCall, write func([]*hbCall) error) (string, error) {
	c.ctx, c.done = ctx, make(chan struct{})
	limit := b.limit
	if limit <= 0 {
		limit = hbQueueMax
	}
	b.mu.Lock()
	if len(b.queue) >= limit {
		b.mu.Unlock()
		return "", errHBBusy
	}
	b.queue = append(b.queue, c)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.drain(write)
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// drain writes batches until the queue is empty. The calls whose context
// ended while they waited are left out of their batch.
func (b *hbBatcher) drain(write func([]*hbCall) error) {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.queue = nil // do not keep a large backing array
			b.running = false
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), hbBatchMax)
		taken := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		batch := make([]*hbCall, 0, len(taken))
		for _, c := range taken {
			if c.ctx.Err() == nil {
				batch = append(batch, c)
			}
		}
		var err error
		if len(batch) > 0 {
			err = write(batch)
		}
		for _, c := range batch {
			if err != nil {
				c.err = err
			}
			close(c.done)
		}
	}
}

// writeHeartbeats runs the batch heartbeat script for batch (one call:
// every key shares the master's hash tag) and sets each call's answer.
func (s *Server) writeHeartbeats(batch []*hbCall) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys := make([]string, 0, 3+2*len(batch))
	args := make([]any, 0, 2+3*len(batch))
	keys = append(keys, s.key("nodes"), s.regSeqKey(), s.regChangedKey())
	args = append(args, s.cfg.MissedAfter.Milliseconds(), s.cfg.EntryTTL.Milliseconds())
	for _, c := range batch {
		keys = append(keys, c.bindKey, c.nodeKey)
		args = append(args, c.fp, c.rec, c.id)
	}
	res, err := heartbeatBatchScript.Run(ctx, s.hbw, keys, args...).StringSlice()
	if err != nil {
		return err
	}
	for i, c := range batch {
		if i < len(res) {
			c.res = res[i]
		}
	}
	// Then the change sequence the script gave the entries it wrote, and
	// each one's change before: this master's copy of the registry takes
	// them from here, not from Redis (regState.noteOwn).
	if n := len(batch); len(res) == 2*n+1 {
		if seq, err := strconv.ParseInt(res[n], 10, 64); err == nil && seq > 0 {
			prev := make([]int64, n)
			for i := range prev {
				if prev[i], err = strconv.ParseInt(res[n+1+i], 10, 64); err != nil {
					prev[i] = -1
				}
			}
			s.reg.noteOwn(batch, seq, prev)
		}
	}
	return nil
}

// heartbeatBatchScript writes a batch of heartbeats. KEYS[1] is the node
// index, KEYS[2] the registry's change sequence and KEYS[3] its change
// log (registry_sync.go); then, per node i, KEYS[2i+2] its binding and
// KEYS[2i+3] its entry. ARGV[1] is the binding TTL and ARGV[2] the entry
// TTL (ms); then, per node i, ARGV[3i] its credential fingerprint ("":
// no auth), ARGV[3i+1] its record and ARGV[3i+2] its ID. Per node it
// renews the binding (when a fingerprint is given), refreshes the entry
// only if it exists and keeps the node in the index, answering "ok",
// "gone" (the entry expired: register again) or "taken" (another live
// credential holds the ID); then the change sequence the entries written
// got ("0": none); then per node the sequence of its change before this
// one ("0": none in the log, "-1": not written). A binding that lapsed (the node's heartbeats
// were late by MissedAfter) is taken again, as Register would: nobody
// holds the ID, and the entry is still there. Answering "register again"
// instead sent every late node of a loaded master through Register (four
// more Redis calls, and the gRPC call around them): a tenth of the
// master's CPU at N = 5000 went to that storm (BenchmarkFleet). The nodes
// written get one new change sequence number in the change log.
var heartbeatBatchScript = redis.NewScript(`
local out, live, prev, seq = {}, {}, {}, 0
local n = (#KEYS - 3) / 2
for i = 1, n do
  local bk, nk = KEYS[2*i+2], KEYS[2*i+3]
  local fp, rec, id = ARGV[3*i], ARGV[3*i+1], ARGV[3*i+2]
  local r = 'ok'
  if fp ~= '' then
    local cur = redis.call('get', bk)
    if not cur then redis.call('set', bk, fp, 'PX', ARGV[1])
    elseif cur ~= fp then r = 'taken'
    else redis.call('pexpire', bk, ARGV[1]) end
  end
  if r == 'ok' then
    if redis.call('set', nk, rec, 'XX', 'PX', ARGV[2]) then
      live[#live+1] = id
      prev[i] = redis.call('zscore', KEYS[3], id) or '0'
    else
      r = 'gone'
    end
  end
  out[i] = r
end
if #live > 0 then
  redis.call('sadd', KEYS[1], unpack(live))
  local v, z = redis.call('incr', KEYS[2]), {}
  for j, id in ipairs(live) do z[2*j-1] = v; z[2*j] = id end
  redis.call('zadd', KEYS[3], unpack(z))
  seq = v
end
out[n+1] = tostring(seq)
for i = 1, n do out[n+1+i] = prev[i] or '-1' end
return out`)
