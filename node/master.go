package node

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	willowv1 "willow/proto/willow/v1"
)

// runMaster keeps the node registered, heartbeating and watching the flex
// state until ctx is done. Failures are retried with backoff; the node keeps
// its last knobs meanwhile.
func (n *Node) runMaster(ctx context.Context) {
	conn, err := n.Dial(n.cfg.MasterAddr)
	if err != nil {
		n.log.Error("dial master", "err", err)
		return
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	done := make(chan struct{})
	go func() { defer close(done); n.watchLoop(ctx, mc) }()
	n.heartbeatLoop(ctx, mc)
	<-done
}

func (n *Node) heartbeatLoop(ctx context.Context, mc willowv1.MasterClient) {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	hb := NewHeartbeater(mc, n.applyHeartbeat)
	defer hb.Close()
	for {
		if n.activeDrill("silence") == nil {
			n.beat(ctx, mc, hb)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) beat(ctx context.Context, mc willowv1.MasterClient, hb *Heartbeater) {
	if !n.registered.Load() {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.HeartbeatInterval)
		defer cancel()
		resp, err := mc.Register(cctx, &willowv1.RegisterRequest{Node: n.Info()})
		if err != nil {
			n.log.Debug("register", "err", err)
			return
		}
		n.registered.Store(true)
		n.ApplyFlex(resp.GetFlex())
		n.log.Info("registered with master", "master", n.cfg.MasterAddr)
		return
	}
	var ver int64
	if st := n.Flex(); st != nil {
		ver = st.GetVersion()
	}
	resp, err := hb.Beat(ctx, &willowv1.HeartbeatRequest{Node: n.Info(), Load: n.load(), FlexVersion: ver}, n.cfg.HeartbeatInterval)
	if err != nil {
		n.log.Debug("heartbeat", "err", err)
		return
	}
	if resp != nil {
		n.applyHeartbeat(resp)
	}
}

// applyHeartbeat takes the master's answer to a heartbeat: register again
// when it asks, and run the drills it lists (none: the drills ended).
func (n *Node) applyHeartbeat(resp *willowv1.HeartbeatResponse) {
	if resp.GetReregister() {
		n.registered.Store(false)
	}
	n.setDrills(resp.GetDrills())
}

// unaryHeartbeatFor is how long a node heartbeats by unary calls after
// its master answered HeartbeatStream with Unimplemented (an older
// master) before it tries the stream again.
const unaryHeartbeatFor = time.Minute

// Heartbeater sends a node's heartbeats to its master, one at a time:
// over one long-lived HeartbeatStream, opened at the first heartbeat and
// again at the one after it broke, or by unary Heartbeat calls while the
// master does not have the stream. One goroutine owns it (the node's
// heartbeat loop; each simulated node of BenchmarkFleet).
//
// On the stream the heartbeats ask for sparse answers: the first one on
// a stream waits for its answer (the master always sends it; it says
// whether the master has the stream, and which drills the node runs);
// the later ones are only sent, and the answers the master sends for
// them (register again, other drills, a newer flex version) are read by
// the stream's own reader and handed to apply as they come. A master that
// answers every heartbeat (one that predates sparse answers) is served
// the same way.
type Heartbeater struct {
	mc         willowv1.MasterClient
	apply      func(*willowv1.HeartbeatResponse) // an answer read by a stream's reader
	opts       []grpc.CallOption                 // added to every call
	cur        *hbStream                         // the open stream, nil when none
	unaryUntil time.Time                         // the master has no stream: unary calls until then
}

// hbStream is one open HeartbeatStream and its reader.
type hbStream struct {
	st     grpc.BidiStreamingClient[willowv1.HeartbeatRequest, willowv1.HeartbeatResponse]
	cancel context.CancelFunc // ends st
	ended  chan struct{}      // closed when the reader stopped: st broke or was ended
	err    error              // why the reader stopped; set before ended is closed
}

// NewHeartbeater returns a Heartbeater to mc that hands the answers its
// streams' readers take to apply (from the reader's goroutine). opts are
// added to every call: a node's credentials when the connection does not
// carry them.
func NewHeartbeater(mc willowv1.MasterClient, apply func(*willowv1.HeartbeatResponse), opts ...grpc.CallOption) *Heartbeater {
	// Fail fast (gRPC's default, stated): a master that is away fails the
	// heartbeat now, and the next one tries again.
	return &Heartbeater{mc: mc, apply: apply, opts: append(slices.Clip(opts), grpc.WaitForReady(false))}
}

// Beat sends req within timeout, asking for sparse answers (it sets
// req.SparseAnswers; unary calls are always answered). On a stream it opens, it returns the
// master's answer; on one already open it returns a nil answer once req
// is sent (the answers, when any, go to h.apply). A stream that broke
// is replaced by a new one for req; a stream whose first answer is late,
// or whose send does not go through within timeout, is closed (the next
// beat opens another); when the master does not have the stream, this
// heartbeat and those of the next unaryHeartbeatFor are unary calls.
func (h *Heartbeater) Beat(ctx context.Context, req *willowv1.HeartbeatRequest, timeout time.Duration) (*willowv1.HeartbeatResponse, error) {
	req.SparseAnswers = true
	if time.Now().Before(h.unaryUntil) {
		return h.unary(ctx, req, timeout)
	}
	if cur := h.cur; cur != nil {
		select {
		case <-cur.ended: // broke since the last beat: req opens another
			h.Close()
		default:
			late := time.AfterFunc(timeout, cur.cancel) // a blocked send ends the stream
			err := cur.st.Send(req)
			if !late.Stop() || err != nil {
				if errors.Is(err, io.EOF) { // the stream ended: its reader has the status
					<-cur.ended
					err = cur.err
				}
				h.Close()
				if err == nil {
					err = context.DeadlineExceeded
				}
				return nil, err
			}
			return nil, nil
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := h.mc.HeartbeatStream(sctx, h.opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	late := time.AfterFunc(timeout, cancel) // a late first answer ends the stream
	err = st.Send(req)
	var resp *willowv1.HeartbeatResponse
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: the stream ended, Recv says how
		resp, err = st.Recv()
	}
	if !late.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		if status.Code(err) == codes.Unimplemented {
			h.unaryUntil = time.Now().Add(unaryHeartbeatFor)
			return h.unary(ctx, req, timeout)
		}
		return nil, err
	}
	cur := &hbStream{st: st, cancel: cancel, ended: make(chan struct{})}
	h.cur = cur
	go func() {
		defer close(cur.ended)
		for {
			resp, err := cur.st.Recv()
			if err != nil {
				cur.err = err
				return
			}
			h.apply(resp)
		}
	}()
	return resp, nil
}

func (h *Heartbeater) unary(ctx context.Context, req *willowv1.HeartbeatRequest, timeout time.Duration) (*willowv1.HeartbeatResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return h.mc.Heartbeat(cctx, req, h.opts...)
}

// Close ends the stream, if one is open, and waits for its reader.
func (h *Heartbeater) Close() {
	if cur := h.cur; cur != nil {
		cur.cancel()
		<-cur.ended
		h.cur = nil
	}
}

// jitter spreads a reconnect delay over [d/2, d], so the nodes a master
// restart disconnected do not all come back in the same instant.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}

// watchLoop follows the master's Watch stream, reconnecting with jittered
// backoff.
func (n *Node) watchLoop(ctx context.Context, mc willowv1.MasterClient) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		stream, err := mc.Watch(ctx, &willowv1.WatchRequest{NodeId: n.cfg.ID, Region: n.cfg.Region, Group: n.cfg.Group},
			grpc.WaitForReady(false), grpc.UseCompressor(Zstd))
		if err == nil {
			for first := true; ; first = false {
				ev, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				backoff = 100 * time.Millisecond
				n.applyFlex(ev.GetFlex(), first)
				if ev.Drills != nil {
					n.setDrills(ev.GetDrills())
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Debug("watch", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}
