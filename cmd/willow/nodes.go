package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// nodeLine is one node in `willow nodes --json`.
type nodeLine struct {
	ID            string  `json:"id"`
	Role          string  `json:"role"`
	Region        string  `json:"region"`
	Zone          string  `json:"zone,omitempty"`
	Addr          string  `json:"addr"`
	HTTPAddr      string  `json:"http_addr,omitempty"`
	AdminAddr     string  `json:"admin_addr,omitempty"` // /metrics and /healthz
	State         string  `json:"state"`
	Since         string  `json:"since,omitempty"`
	Reason        string  `json:"reason,omitempty"`
	LastHeartbeat string  `json:"last_heartbeat,omitempty"`
	CPU           float64 `json:"cpu"`
	InFlight      int32   `json:"in_flight"`
	QueueMs       float64 `json:"queue_ms"`
	SuccessRate   float64 `json:"success_rate"`
	Requests      int64   `json:"requests"`
}

func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func cmdNodes(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("nodes")
	role := fs.String("role", "", "only nodes of this role")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	mc, ctx, done, err := g.masterClient(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := mc.ListNodes(ctx, &willowv1.ListNodesRequest{Role: *role})
	if err != nil {
		return err
	}
	if *role == "" {
		// The master itself first (masters do not register as nodes).
		self, err := mc.ListNodes(ctx, &willowv1.ListNodesRequest{Role: "master"})
		if err != nil {
			return err
		}
		resp.Nodes = append(self.GetNodes(), resp.GetNodes()...)
	}
	if g.json {
		enc := json.NewEncoder(m.Stdout)
		for _, n := range resp.GetNodes() {
			info, l := n.GetNode(), n.GetLoad()
			if err := enc.Encode(nodeLine{
				ID: info.GetId(), Role: info.GetRole(), Region: info.GetRegion(), Zone: info.GetZone(),
				Addr: info.GetAddr(), HTTPAddr: info.GetHttpAddr(), AdminAddr: info.GetAdminAddr(), State: n.GetState(),
				Since: msTime(n.GetStateSinceUnixMs()), Reason: n.GetReason(),
				LastHeartbeat: msTime(n.GetLastHeartbeatUnixMs()), CPU: l.GetCpu(), InFlight: l.GetInFlight(),
				QueueMs: l.GetQueueMs(), SuccessRate: l.GetSuccessRate(), Requests: l.GetRequests(),
			}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tREGION\tADDR\tADMIN\tSTATE\tLOAD\tSINCE\tID\tREASON")
	now := time.Now()
	for _, n := range resp.GetNodes() {
		info, l := n.GetNode(), n.GetLoad()
		load := fmt.Sprintf("cpu=%.2f inflight=%d queue=%.0fms ok=%.0f%%", l.GetCpu(), l.GetInFlight(), l.GetQueueMs(), 100*l.GetSuccessRate())
		since := "-"
		if ms := n.GetStateSinceUnixMs(); ms > 0 {
			since = now.Sub(time.UnixMilli(ms)).Round(time.Second).String() + " ago"
		}
		region := info.GetRegion()
		if region == "" {
			region = "-"
		}
		if n.GetLoad() == nil {
			load = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", info.GetRole(), region, info.GetAddr(), info.GetAdminAddr(),
			n.GetState(), load, since, info.GetId(), n.GetReason())
	}
	return tw.Flush()
}
