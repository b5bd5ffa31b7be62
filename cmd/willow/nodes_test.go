package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"willow/auth"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
)

// startMasterWithNodes runs a master on a real Redis and one upload node
// per region, and waits until both are listed healthy.
func startMasterWithNodes(t *testing.T) (masterAddr string, nodes []*node.Node) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	quiet := slog.New(slog.DiscardHandler)
	mn, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: quiet, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := master.New(master.Config{OncallToken: "t", RefreshInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond},
		master.Deps{Node: mn, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 4)
	t.Cleanup(func() {
		cancel()
		for range cap(done) {
			<-done
		}
	})
	go func() { _ = mn.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	for _, region := range []string{"a", "b"} {
		n, err := node.New(node.Config{ID: "upload-" + region + "-1", Role: "upload", Region: region, MasterAddr: mn.Addr(),
			HeartbeatInterval: 100 * time.Millisecond, Logger: quiet, ShutdownGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		go func() { _ = n.Run(ctx); done <- struct{}{} }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _, code := runCLI(t, "nodes", "--master", mn.Addr(), "--json")
		if code == 0 && strings.Count(out, `"healthy"`) == 3 { // the master and two fronts
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not healthy: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return mn.Addr(), nodes
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code = m.Run(context.Background(), args)
	return out.String(), errb.String(), code
}

func TestNodesJSON(t *testing.T) {
	addr, nodes := startMasterWithNodes(t)
	out, errs, code := runCLI(t, "nodes", "--master", addr, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the master and one per node:\n%s", len(lines), out)
	}
	var self map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &self); err != nil || self["role"] != "master" || self["addr"] != addr ||
		self["admin_addr"] == "" || self["admin_addr"] == nil || self["state"] != "healthy" {
		t.Errorf("first line is not the master with its admin address: %s (%v)", lines[0], err)
	}
	for i, line := range lines[1:] {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d not JSON: %v: %s", i, err, line)
		}
		want := map[string]any{"role": "upload", "region": nodes[i].Config().Region, "addr": nodes[i].Addr(), "state": "healthy",
			"admin_addr": nodes[i].AdvertisedAdminAddr()}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, got[k], v)
			}
		}
	}

	out, errs, code = runCLI(t, "nodes", "--master", addr)
	if code != 0 || !strings.Contains(out, "ROLE") || !strings.Contains(out, nodes[0].Addr()) {
		t.Fatalf("table: exit %d\n%s%s", code, out, errs)
	}
	if _, _, code := runCLI(t, "nodes"); code != 2 {
		t.Fatalf("nodes without --master: exit %d, want 2", code)
	}
}

func TestDrillCLI(t *testing.T) {
	addr, nodes := startMasterWithNodes(t)
	target := nodes[0]
	_, errs, code := runCLI(t, "drill", "errors", "--master", addr, "--node", target.Addr(), "--ratio", "0.5", "--for", "1s", "--token", "wrong")
	if code != 1 || !strings.Contains(errs, "UNAUTHENTICATED") || !strings.Contains(errs, auth.ReasonBadCredentials) {
		t.Fatalf("drill with a wrong token: exit %d, stderr %q", code, errs)
	}
	if _, errs, code := runCLI(t, "drill", "latency", "--master", addr, "--node", target.Addr(), "--for", "1s"); code != 2 {
		t.Fatalf("latency drill without --latency: exit %d, %s", code, errs)
	}
	out, errs, code := runCLI(t, "drill", "latency", "--master", addr, "--node", target.Config().ID,
		"--latency", "50ms", "--for", "1s", "--token", "t", "--reason", "game day", "--json")
	if code != 0 {
		t.Fatalf("drill: exit %d: %s", code, errs)
	}
	var d drillLine
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Node != target.Addr() || d.LatencyMs != 50 || d.ExpiresAt == "" {
		t.Fatalf("drill output %q (%v)", out, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(target.Drills()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("drill never reached the node")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, _, _ = runCLI(t, "drill", "list", "--master", addr, "--json")
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"latency"`) {
		t.Fatalf("drill list: %q", out)
	}
	if _, errs, code := runCLI(t, "drill", "stop", "latency", "--master", addr, "--node", target.Addr(), "--token", "t"); code != 0 {
		t.Fatalf("drill stop: exit %d: %s", code, errs)
	}
	out, _, _ = runCLI(t, "drill", "list", "--master", addr, "--json")
	if out != "" {
		t.Fatalf("drill list after stop: %q", out)
	}
}
