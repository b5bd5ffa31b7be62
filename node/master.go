package node

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
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
	hb := &heartbeater{mc: mc}
	defer hb.close()
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

func (n *Node) beat(ctx context.Context, mc willowv1.MasterClient, hb *heartbeater) {
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
	resp, err := hb.beat(ctx, &willowv1.HeartbeatRequest{Node: n.Info(), Load: n.load(), FlexVersion: ver}, n.cfg.HeartbeatInterval)
	if err != nil {
		n.log.Debug("heartbeat", "err", err)
		return
	}
	if resp.GetReregister() {
		n.registered.Store(false)
	}
	n.setDrills(resp.GetDrills())
}

// unaryHeartbeatFor is how long a node heartbeats by unary calls after
// its master answered HeartbeatStream with Unimplemented (an older
// master) before it tries the stream again.
const unaryHeartbeatFor = time.Minute

// heartbeater sends a node's heartbeats to its master, one at a time:
// over one long-lived HeartbeatStream, opened at the first heartbeat and
// again at the one after it broke, or by unary Heartbeat calls while the
// master does not have the stream. The node's heartbeat loop owns it.
type heartbeater struct {
	mc         willowv1.MasterClient
	stream     grpc.BidiStreamingClient[willowv1.HeartbeatRequest, willowv1.HeartbeatResponse]
	cancel     context.CancelFunc // ends stream
	unaryUntil time.Time          // the master has no stream: unary calls until then
}

// beat sends req and returns the master's answer within timeout. A
// stream whose answer is late or fails is closed (the next beat opens
// another); when the master does not have the stream, this heartbeat and
// those of the next unaryHeartbeatFor are unary calls.
func (h *heartbeater) beat(ctx context.Context, req *willowv1.HeartbeatRequest, timeout time.Duration) (*willowv1.HeartbeatResponse, error) {
	if time.Now().Before(h.unaryUntil) {
		return h.unary(ctx, req, timeout)
	}
	if h.stream == nil {
		sctx, cancel := context.WithCancel(ctx)
		st, err := h.mc.HeartbeatStream(sctx, grpc.WaitForReady(false))
		if err != nil {
			cancel()
			return nil, err
		}
		h.stream, h.cancel = st, cancel
	}
	late := time.AfterFunc(timeout, h.cancel) // a late answer ends the stream
	err := h.stream.Send(req)
	var resp *willowv1.HeartbeatResponse
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: the stream ended, Recv says how
		resp, err = h.stream.Recv()
	}
	if !late.Stop() || err != nil {
		h.close()
	}
	if err == nil {
		return resp, nil
	}
	if status.Code(err) == codes.Unimplemented {
		h.unaryUntil = time.Now().Add(unaryHeartbeatFor)
		return h.unary(ctx, req, timeout)
	}
	return nil, err
}

func (h *heartbeater) unary(ctx context.Context, req *willowv1.HeartbeatRequest, timeout time.Duration) (*willowv1.HeartbeatResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return h.mc.Heartbeat(cctx, req)
}

// close ends the stream, if one is open.
func (h *heartbeater) close() {
	if h.stream != nil {
		h.cancel()
		h.stream, h.cancel = nil, nil
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
