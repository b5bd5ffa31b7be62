package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// drillLine is one drill in `willow drill ... --json`.
type drillLine struct {
	ID         string  `json:"id"`
	Node       string  `json:"node"`
	Kind       string  `json:"kind"`
	LatencyMs  int64   `json:"latency_ms,omitempty"`
	ErrorRatio float64 `json:"error_ratio,omitempty"`
	ExpiresAt  string  `json:"expires_at,omitempty"`
	Actor      string  `json:"actor,omitempty"`
	Reason     string  `json:"reason,omitempty"`
}

func toDrillLine(d *willowv1.Drill) drillLine {
	return drillLine{ID: d.GetId(), Node: d.GetNodeAddr(), Kind: d.GetKind(), LatencyMs: d.GetLatencyMs(),
		ErrorRatio: d.GetErrorRatio(), ExpiresAt: msTime(d.GetExpiresAtUnixMs()), Actor: d.GetActor(), Reason: d.GetReason()}
}

const drillUsage = "drill latency|errors|silence --node ADDR|ID --for DURATION [--latency D] [--ratio F] [--reason R] | drill stop KIND --node ADDR | drill list"

// cmdDrill orders, ends or lists fault drills:
//
//	willow drill latency --node ADDR --latency 200ms --for 1m
//	willow drill errors  --node ADDR --ratio 0.5 --for 1m
//	willow drill silence --node ADDR --for 30s
//	willow drill stop latency --node ADDR
//	willow drill list [--json]
func cmdDrill(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("drill")
	nodeF := fs.String("node", "", "the node's gRPC address or ID")
	forF := fs.Duration("for", 0, "how long the drill lasts (it ends by itself)")
	latency := fs.Duration("latency", 0, "latency drill: delay added to every request")
	ratio := fs.Float64("ratio", 0, "errors drill: fraction of requests to fail, 0..1")
	reason := fs.String("reason", "", "why (audited)")
	actor := fs.String("actor", "", "who (audited); default $USER")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("usage: %s", drillUsage)
	}
	mc, ctx, done, err := g.masterClient(ctx)
	if err != nil {
		return err
	}
	defer done()
	if pos[0] == "list" {
		resp, err := mc.ListDrills(ctx, &willowv1.ListDrillsRequest{})
		if err != nil {
			return err
		}
		for _, d := range resp.GetDrills() {
			if err := printDrill(m, g.json, d); err != nil {
				return err
			}
		}
		return nil
	}
	kind := pos[0]
	d := &willowv1.Drill{NodeAddr: *nodeF, Kind: kind, Actor: *actor, Reason: *reason}
	if d.Actor == "" {
		d.Actor = m.Getenv("USER")
	}
	forMs := forF.Milliseconds()
	switch kind {
	case "stop":
		if len(pos) < 2 {
			return usagef("drill stop KIND --node ADDR")
		}
		d.Kind, forMs = pos[1], 0
	case "latency":
		if *latency <= 0 {
			return usagef("latency drill needs --latency DURATION")
		}
		d.LatencyMs = latency.Milliseconds()
	case "errors":
		if *ratio <= 0 || *ratio > 1 {
			return usagef("errors drill needs --ratio between 0 and 1")
		}
		d.ErrorRatio = *ratio
	case "silence":
	default:
		return usagef("unknown drill %q; usage: %s", kind, drillUsage)
	}
	if *nodeF == "" {
		return usagef("need --node ADDR")
	}
	if kind != "stop" && *forF <= 0 {
		return usagef("need --for DURATION")
	}
	resp, err := mc.SetDrill(ctx, &willowv1.SetDrillRequest{Token: g.oncallToken(), Drill: d, ForMs: forMs})
	if err != nil {
		return err
	}
	return printDrill(m, g.json, resp.GetDrill())
}

func printDrill(m *Main, asJSON bool, d *willowv1.Drill) error {
	if asJSON {
		return json.NewEncoder(m.Stdout).Encode(toDrillLine(d))
	}
	what := d.GetKind()
	switch d.GetKind() {
	case "latency":
		what = fmt.Sprintf("latency +%dms", d.GetLatencyMs())
	case "errors":
		what = fmt.Sprintf("errors %.0f%%", 100*d.GetErrorRatio())
	}
	until := "ended"
	if ms := d.GetExpiresAtUnixMs(); ms > time.Now().UnixMilli() {
		until = "until " + msTime(ms)
	}
	_, err := fmt.Fprintf(m.Stdout, "%s on %s %s\n", what, d.GetNodeAddr(), until)
	return err
}
