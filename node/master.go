package node

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"

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
	for {
		if n.activeDrill("silence") == nil {
			n.beat(ctx, mc)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) beat(ctx context.Context, mc willowv1.MasterClient) {
	cctx, cancel := context.WithTimeout(ctx, n.cfg.HeartbeatInterval)
	defer cancel()
	if !n.registered.Load() {
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
	resp, err := mc.Heartbeat(cctx, &willowv1.HeartbeatRequest{Node: n.Info(), Load: n.load(), FlexVersion: ver})
	if err != nil {
		n.log.Debug("heartbeat", "err", err)
		return
	}
	if resp.GetReregister() {
		n.registered.Store(false)
	}
	n.setDrills(resp.GetDrills())
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
