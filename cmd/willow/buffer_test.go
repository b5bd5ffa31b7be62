package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/buffer"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	"willow/store/fs"
	"willow/token"
	"willow/upload"
)

// startMasterWithFront runs a master on a real Redis and one upload front
// with both buffer pools registered with it.
func startMasterWithFront(t *testing.T) (masterAddr string, front *node.Node) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	quiet := slog.New(slog.DiscardHandler)
	mn, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: quiet, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := master.New(master.Config{OncallToken: "t", RefreshInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond},
		master.Deps{Node: mn, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	un, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", MasterAddr: mn.Addr(),
		HeartbeatInterval: 100 * time.Millisecond, Logger: quiet, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := fs.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	p1, err := buffer.Open(filepath.Join(dir, "p1"), buffer.Options{Name: "pool1"})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := buffer.Open(filepath.Join(dir, "p2"), buffer.Options{Name: "pool2"})
	if err != nil {
		t.Fatal(err)
	}
	us, err := upload.New(upload.Config{Secret: []byte("s"), StagingDir: filepath.Join(dir, "staging")},
		upload.Deps{Node: un, Store: st, Pool1: p1, Pool2: p2})
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
		p1.Close()
		p2.Close()
	})
	for _, run := range []func(context.Context) error{mn.Run, ms.Run, un.Run, us.Run} {
		go func() { _ = run(ctx); done <- struct{}{} }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _, code := runCLI(t, "nodes", "--master", mn.Addr(), "--json")
		if code == 0 && strings.Contains(out, `"role":"upload"`) && strings.Count(out, `"healthy"`) == 2 { // the master and the front
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("front not healthy: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return mn.Addr(), un
}

func TestBufferCLI(t *testing.T) {
	addr, front := startMasterWithFront(t)
	out, errs, code := runCLI(t, "buffer", "status", "--master", addr, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per pool:\n%s", out)
	}
	for i, line := range lines {
		var l bufferLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Node != "upload-a-1" || l.Pool != int32(i+1) || l.Mode != "auto" || l.Addr != front.Addr() || l.Items != 0 {
			t.Fatalf("line %d = %+v", i, l)
		}
	}
	out, errs, code = runCLI(t, "buffer", "status", "--master", addr)
	if code != 0 || !strings.Contains(out, "DRAIN/S") || !strings.Contains(out, "upload-a-1") {
		t.Fatalf("table: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = runCLI(t, "buffer", "drain", "--pool", "2", "--master", addr, "--json")
	if code != 0 || !strings.Contains(out, `"drained":0`) || !strings.Contains(out, `"remaining":0`) {
		t.Fatalf("drain: exit %d\n%s%s", code, out, errs)
	}
	if _, _, code := runCLI(t, "buffer", "drain", "--master", addr); code != 2 {
		t.Fatalf("drain without --pool: exit %d, want 2", code)
	}
	if _, _, code := runCLI(t, "buffer", "bogus"); code != 2 {
		t.Fatalf("unknown subcommand: exit %d, want 2", code)
	}
	// Straight to a front, no master.
	if out, errs, code := runCLI(t, "buffer", "status", "--addr", front.Addr(), "--json"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Fatalf("--addr: exit %d\n%s%s", code, out, errs)
	}
}

func TestTokenCLI(t *testing.T) {
	var out, errb strings.Builder
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		if k == "WILLOW_UPLOAD_SECRET" {
			return "dev-secret"
		}
		return ""
	}}
	if code := m.Run(context.Background(), []string{"token", "--user", "u1", "--business", "avatar", "--ttl", "2h"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	c, err := token.Verify([]byte("dev-secret"), strings.TrimSpace(out.String()), time.Now())
	if err != nil || c.User != "u1" || c.Business != "avatar" || c.Expiry.Before(time.Now().Add(119*time.Minute)) {
		t.Fatalf("token %q: %+v, %v", out.String(), c, err)
	}
	if _, _, code := runCLI(t, "token", "--user", "u1"); code != 1 {
		t.Fatalf("no secret: exit %d, want 1", code)
	}
	if _, _, code := runCLI(t, "token"); code != 2 {
		t.Fatalf("no user: exit %d, want 2", code)
	}
}
