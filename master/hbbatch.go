package master

import (
	"context"
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
// There is no background goroutine: the first heartbeat that finds no
// batch in flight writes one, holding every heartbeat queued behind it
// (up to hbBatchMax), and hands the turn to the first of those that came
// after.

// hbBatchMax bounds one batch (one script call keeps Redis busy for
// about 10 µs per heartbeat).
const hbBatchMax = 512

// hbCall is one heartbeat's write: the node's binding (fp: its
// credential fingerprint, "" without auth) and its encoded record.
type hbCall struct {
	id, fp string
	rec    []byte
	res    string // the heartbeat script's answer for this node
	err    error
	done   chan struct{} // closed when res/err are set
	turn   chan struct{} // closed when this call is to write the next batch
}

type hbBatcher struct {
	mu      sync.Mutex
	queue   []*hbCall
	running bool // a batch is in flight (its writer hands the turn on)
}

// do writes c with the heartbeats queued with it through write, and
// returns its answer. A call still queued when ctx ends leaves the queue
// (a stalled Redis must not hold heartbeats past their deadline).
func (b *hbBatcher) do(ctx context.Context, c *hbCall, write func([]*hbCall) error) (string, error) {
	c.done, c.turn = make(chan struct{}), make(chan struct{})
	b.mu.Lock()
	b.queue = append(b.queue, c)
	mine := !b.running
	b.running = true
	b.mu.Unlock()
	if !mine {
		// Wait for the answer, or for the turn to write: the writer
		// before hands it on only to the call at the head of the queue,
		// so the turn always comes with c in the batch taken.
		select {
		case <-c.done:
			return c.res, c.err
		case <-c.turn:
		case <-ctx.Done():
			if b.leave(c) {
				return "", ctx.Err()
			}
			select { // taken into a batch (bounded by its timeout), or given the turn
			case <-c.done:
				return c.res, c.err
			case <-c.turn:
			}
		}
	}
	b.mu.Lock()
	n := min(len(b.queue), hbBatchMax)
	batch := b.queue[:n:n]
	b.queue = append([]*hbCall(nil), b.queue[n:]...)
	b.mu.Unlock()
	err := write(batch)
	for _, x := range batch {
		if err != nil {
			x.err = err
		}
		close(x.done)
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		close(b.queue[0].turn)
	} else {
		b.running = false
	}
	b.mu.Unlock()
	return c.res, c.err
}

// leave takes c out of the queue if it is still waiting there without
// the turn, and reports whether it did.
func (b *hbBatcher) leave(c *hbCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-c.turn:
		return false
	default:
	}
	for i, x := range b.queue {
		if x == c {
			b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// writeHeartbeats runs the batch heartbeat script for batch (one call:
// every key shares the master's hash tag) and sets each call's answer.
func (s *Server) writeHeartbeats(batch []*hbCall) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys := make([]string, 0, 1+2*len(batch))
	args := make([]any, 0, 2+3*len(batch))
	keys = append(keys, s.key("nodes"))
	args = append(args, s.cfg.MissedAfter.Milliseconds(), s.cfg.EntryTTL.Milliseconds())
	for _, c := range batch {
		keys = append(keys, s.bindKey(c.id), s.nodeKey(c.id))
		args = append(args, c.fp, c.rec, c.id)
	}
	res, err := heartbeatBatchScript.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil {
		return err
	}
	for i, c := range batch {
		if i < len(res) {
			c.res = res[i]
		}
	}
	return nil
}

// heartbeatBatchScript writes a batch of heartbeats. KEYS[1] is the node
// index; then, per node i, KEYS[2i] its binding and KEYS[2i+1] its entry.
// ARGV[1] is the binding TTL and ARGV[2] the entry TTL (ms); then, per
// node i, ARGV[3i] its credential fingerprint ("": no auth), ARGV[3i+1]
// its record and ARGV[3i+2] its ID. Per node it renews the binding (when
// a fingerprint is given), refreshes the entry only if it exists and
// keeps the node in the index, answering "ok", "gone" (the entry
// expired: register again), "unbound" (the binding lapsed) or "taken"
// (another live credential holds the ID).
var heartbeatBatchScript = redis.NewScript(`
local out, live = {}, {}
for i = 1, (#KEYS - 1) / 2 do
  local bk, nk = KEYS[2*i], KEYS[2*i+1]
  local fp, rec, id = ARGV[3*i], ARGV[3*i+1], ARGV[3*i+2]
  local r = 'ok'
  if fp ~= '' then
    local cur = redis.call('get', bk)
    if not cur then r = 'unbound'
    elseif cur ~= fp then r = 'taken'
    else redis.call('pexpire', bk, ARGV[1]) end
  end
  if r == 'ok' then
    if redis.call('set', nk, rec, 'XX', 'PX', ARGV[2]) then
      live[#live+1] = id
    else
      r = 'gone'
    end
  end
  out[i] = r
end
if #live > 0 then redis.call('sadd', KEYS[1], unpack(live)) end
return out`)
