package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	willowv1 "willow/proto/willow/v1"
)

// bufferLine is one pool of one front in `willow buffer status --json`.
type bufferLine struct {
	Node         string  `json:"node"`
	Region       string  `json:"region,omitempty"`
	Addr         string  `json:"addr"`
	Pool         int32   `json:"pool"`
	Mode         string  `json:"mode"`
	Items        int64   `json:"items"`
	Bytes        int64   `json:"bytes"`
	DrainPerS    float64 `json:"drain_per_s"`
	OldestAgeMs  int64   `json:"oldest_age_ms"`
	DrainedTotal int64   `json:"drained_total"`
	// LiveBytes and DeadBytes are the pool's on-disk bytes of live
	// records and of deleted ones not yet compacted away; DiskBytes
	// their sum.
	LiveBytes   int64 `json:"live_bytes"`
	DeadBytes   int64 `json:"dead_bytes"`
	DiskBytes   int64 `json:"disk_bytes"`
	Segments    int32 `json:"segments"`
	Compactions int64 `json:"compactions_total"`
}

// drainLine is one front's answer to `willow buffer drain --json`.
type drainLine struct {
	Node      string `json:"node"`
	Addr      string `json:"addr"`
	Pool      int    `json:"pool"`
	Drained   int64  `json:"drained"`
	Remaining int64  `json:"remaining"`
	Error     string `json:"error,omitempty"`
}

type front struct{ id, region, addr string }

// fronts lists the upload fronts: --addr when given, else the master's
// ListNodes with role upload.
func fronts(ctx context.Context, g *globals, addrs string) ([]front, error) {
	if addrs != "" {
		var out []front
		for _, a := range strings.Split(addrs, ",") {
			out = append(out, front{id: a, addr: a})
		}
		return out, nil
	}
	mc, ctx, done, err := g.masterClient(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := mc.ListNodes(ctx, &willowv1.ListNodesRequest{Role: "upload"})
	if err != nil {
		return nil, err
	}
	var out []front
	for _, n := range resp.GetNodes() {
		info := n.GetNode()
		out = append(out, front{id: info.GetId(), region: info.GetRegion(), addr: info.GetAddr()})
	}
	if len(out) == 0 {
		return nil, errors.New("the master lists no upload fronts")
	}
	return out, nil
}

func withFront(g *globals, f front, fn func(willowv1.UploadClient) error) error {
	conn, err := g.dial(f.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(willowv1.NewUploadClient(conn))
}

func cmdBuffer(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 {
		return usagef("buffer status | drain --pool N")
	}
	sub, args := args[0], args[1:]
	fs, g := m.newFlags("buffer " + sub)
	addr := fs.String("addr", "", "upload front address(es), comma-separated (default: every front the master lists)")
	pool := fs.Int("pool", 0, "pool to drain: 1 or 2")
	wait := fs.Bool("wait", true, "drain: wait until the pool is empty")
	timeout := fs.Duration("timeout", 30*time.Minute, "drain: give up after")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	switch sub {
	case "status":
		return bufferStatus(ctx, m, g, *addr)
	case "drain":
		if *pool != 1 && *pool != 2 {
			return usagef("drain needs --pool 1 or --pool 2")
		}
		return bufferDrain(ctx, m, g, *addr, *pool, *wait, *timeout)
	}
	return usagef("unknown buffer command %q (status | drain --pool N)", sub)
}

func bufferStatus(ctx context.Context, m *Main, g *globals, addrs string) error {
	fr, err := fronts(ctx, g, addrs)
	if err != nil {
		return err
	}
	var lines []bufferLine
	var lastErr error
	for _, f := range fr {
		err := withFront(g, f, func(c willowv1.UploadClient) error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := c.BufferStatus(cctx, &willowv1.BufferStatusRequest{})
			if err != nil {
				return err
			}
			for _, p := range resp.GetPools() {
				lines = append(lines, bufferLine{Node: p.GetNode(), Region: f.region, Addr: f.addr, Pool: p.GetPool(),
					Mode: p.GetMode(), Items: p.GetItems(), Bytes: p.GetBytes(), DrainPerS: p.GetDrainPerS(),
					OldestAgeMs: p.GetOldestAgeMs(), DrainedTotal: p.GetDrainedTotal(),
					LiveBytes: p.GetLiveBytes(), DeadBytes: p.GetDeadBytes(), DiskBytes: p.GetDiskBytes(),
					Segments: p.GetSegments(), Compactions: p.GetCompactionsTotal()})
			}
			return nil
		})
		if err != nil {
			fmt.Fprintf(m.Stderr, "willow buffer: %s (%s): %v\n", f.id, f.addr, err)
			lastErr = fmt.Errorf("%s: %w", f.id, err)
		}
	}
	if g.json {
		enc := json.NewEncoder(m.Stdout)
		for _, l := range lines {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return lastErr
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOOL\tMODE\tITEMS\tBYTES\tLIVE\tDEAD\tDRAIN/S\tOLDEST\tDRAINED")
	for _, l := range lines {
		oldest := "-"
		if l.Items > 0 {
			oldest = (time.Duration(l.OldestAgeMs) * time.Millisecond).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s\t%d\n", l.Node, l.Pool, l.Mode, l.Items, l.Bytes, l.LiveBytes, l.DeadBytes, l.DrainPerS, oldest, l.DrainedTotal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return lastErr
}

func bufferDrain(ctx context.Context, m *Main, g *globals, addrs string, pool int, wait bool, timeout time.Duration) error {
	fr, err := fronts(ctx, g, addrs)
	if err != nil {
		return err
	}
	var lastErr error
	enc := json.NewEncoder(m.Stdout)
	for _, f := range fr {
		line := drainLine{Node: f.id, Addr: f.addr, Pool: pool}
		err := withFront(g, f, func(c willowv1.UploadClient) error {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := c.Drain(cctx, &willowv1.DrainRequest{Pool: int32(pool), Wait: wait})
			line.Drained, line.Remaining = resp.GetDrained(), resp.GetRemaining()
			return err
		})
		if err != nil {
			line.Error = err.Error()
			lastErr = fmt.Errorf("%s: %w", f.id, err)
		}
		if g.json {
			if err := enc.Encode(line); err != nil {
				return err
			}
			continue
		}
		if line.Error != "" {
			fmt.Fprintf(m.Stdout, "%s pool %d: drained %d, %d remaining: %s\n", line.Node, pool, line.Drained, line.Remaining, line.Error)
		} else {
			fmt.Fprintf(m.Stdout, "%s pool %d: drained %d, %d remaining\n", line.Node, pool, line.Drained, line.Remaining)
		}
	}
	return lastErr
}
