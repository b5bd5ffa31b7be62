package loadgen

import (
	"context"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// Observation: every second the cluster's gauges (flex level, pools, held
// notifications, CPU and resources per role from the master's node list)
// and the progress line. It reads records and never makes load.

// RoleResources is what a role's nodes used in one second, from the
// resource counters in their heartbeats (summed over the role's nodes).
type RoleResources struct {
	Nodes int `json:"nodes"`
	// RSSBytes is the sum of the nodes' resident set sizes.
	RSSBytes float64 `json:"rss_bytes"`
	// Rates per second, from the difference of cumulative counters
	// between two heartbeats.
	NetInBps      float64 `json:"net_in_bytes_per_s"`
	NetOutBps     float64 `json:"net_out_bytes_per_s"`
	DiskWriteBps  float64 `json:"disk_write_bytes_per_s"`
	FsyncsPerS    float64 `json:"fsyncs_per_s"`
	SharedProcess bool    `json:"shared_process,omitempty"`
	// Rated says the rates above were measured this second (at least one
	// node sent two heartbeats with counters).
	Rated bool `json:"rated"`
}

// nodeCounters is the last heartbeat counters seen for one node.
type nodeCounters struct {
	atMs                      int64
	in, out, disk, fsyncs     int64
	inR, outR, diskR, fsyncsR float64 // last rates, reused until the next heartbeat
	rated                     bool
}

// observe samples cluster gauges every second and prints progress.
func (r *runner) observe(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	prev := map[string]*nodeCounters{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g := r.sampleCluster(ctx, prev)
		r.mu.Lock()
		r.gauges = append(r.gauges, g)
		r.mu.Unlock()
		r.progress(g)
	}
}

func (r *runner) sampleCluster(ctx context.Context, prev map[string]*nodeCounters) Second {
	cctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	g := Second{T: int(time.Since(r.start) / time.Second), Sampled: true, CPU: map[string]float64{}, InFlight: map[string]float64{}, Nodes: map[string]int{}}
	r.mu.Lock()
	g.Level = r.level
	r.mu.Unlock()
	if st, err := r.cfg.Target.Master.GetFlex(cctx, &willowv1.GetFlexRequest{}); err == nil {
		g.Level = st.GetLevel()
		g.FlexVersion = st.GetVersion()
	}
	if r.cfg.Mode == "auto-flex" {
		if as, err := r.cfg.Target.Master.GetFlexAuto(cctx, &willowv1.GetFlexAutoRequest{}); err == nil {
			g.AutoSignals = as.GetSignals()
		}
	}
	nodes, err := r.cfg.Target.Master.ListNodes(cctx, &willowv1.ListNodesRequest{})
	if err != nil {
		g.Sampled = false
		return g
	}
	g.Resources = map[string]RoleResources{}
	for _, ns := range nodes.GetNodes() {
		role := ns.GetNode().GetRole()
		l := ns.GetLoad()
		g.CPU[role] += l.GetCpu()
		g.InFlight[role] += float64(l.GetInFlight())
		if ns.GetState() == "healthy" {
			g.Nodes[role]++
		}
		rss := float64(l.GetRssBytes())
		if rss == 0 {
			rss = l.GetGauges()["mem_rss_bytes"] // a node from before the resource counters
		}
		if rss > g.MemRSSBytes {
			g.MemRSSBytes = rss
		}
		rr := g.Resources[role]
		rr.Nodes++
		rr.RSSBytes += rss
		rr.SharedProcess = rr.SharedProcess || l.GetSharedProcess()
		if c := nodeRates(prev, ns); c != nil && c.rated {
			rr.Rated = true
			rr.NetInBps += c.inR
			rr.NetOutBps += c.outR
			rr.DiskWriteBps += c.diskR
			rr.FsyncsPerS += c.fsyncsR
		}
		g.Resources[role] = rr
		if r.cfg.Target.Conn == nil {
			continue
		}
		switch role {
		case "upload":
			conn, err := r.cfg.Target.Conn(ns.GetNode().GetAddr())
			if err != nil {
				continue
			}
			bs, err := willowv1.NewUploadClient(conn).BufferStatus(cctx, &willowv1.BufferStatusRequest{})
			if err != nil {
				continue
			}
			for _, p := range bs.GetPools() {
				if p.GetPool() == 1 {
					g.Pool1Items += p.GetItems()
					g.Pool1Bytes += p.GetBytes()
				} else {
					g.Pool2Items += p.GetItems()
					g.Pool2Bytes += p.GetBytes()
				}
			}
		case "timeline":
			conn, err := r.cfg.Target.Conn(ns.GetNode().GetAddr())
			if err != nil {
				continue
			}
			if ts, err := willowv1.NewTimelineClient(conn).Stats(cctx, &willowv1.TimelineStatsRequest{}); err == nil {
				g.HeldItems = ts.GetHeldItems()
			}
		}
	}
	return g
}

// nodeRates updates prev with the node's heartbeat counters and returns
// its rates: counter differences over the time between two heartbeats.
// A counter that went backwards (the node restarted) starts over.
func nodeRates(prev map[string]*nodeCounters, ns *willowv1.NodeStatus) *nodeCounters {
	l, id, at := ns.GetLoad(), ns.GetNode().GetId(), ns.GetLastHeartbeatUnixMs()
	if id == "" {
		id = ns.GetNode().GetAddr()
	}
	c := prev[id]
	cur := nodeCounters{atMs: at, in: l.GetNetBytesIn(), out: l.GetNetBytesOut(), disk: l.GetDiskBytesWritten(), fsyncs: l.GetFsyncs()}
	if c == nil {
		prev[id] = &cur
		return prev[id]
	}
	if at <= c.atMs {
		return c // same heartbeat as last second: keep its rates
	}
	if cur.in < c.in || cur.out < c.out || cur.disk < c.disk || cur.fsyncs < c.fsyncs {
		prev[id] = &cur
		return prev[id]
	}
	dt := float64(at-c.atMs) / 1000
	cur.inR, cur.outR = float64(cur.in-c.in)/dt, float64(cur.out-c.out)/dt
	cur.diskR, cur.fsyncsR = float64(cur.disk-c.disk)/dt, float64(cur.fsyncs-c.fsyncs)/dt
	cur.rated = true
	prev[id] = &cur
	return prev[id]
}
