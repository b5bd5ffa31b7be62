package redisproc_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/redisproc"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestMissingServer: without redis-server on PATH, Start fails with
// ErrNotFound and starts nothing.
func TestMissingServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := redisproc.Start(ctxT(t), redisproc.Options{Dir: t.TempDir()})
	if !errors.Is(err, redisproc.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
}

// TestExitAtStart: a server that exits at start (an invalid port) is
// reported with its log at once, not waited for until the timeout.
func TestExitAtStart(t *testing.T) {
	begin := time.Now()
	_, err := redisproc.Start(ctxT(t), redisproc.Options{Dir: t.TempDir(), Bin: lookPath(t), Port: 70000, Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("err %v, want exited at start", err)
	}
	if d := time.Since(begin); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestRestartKeepsData: a server stopped gracefully and started again on
// the same Dir and port still has its keys (append-only file).
func TestRestartKeepsData(t *testing.T) {
	bin, dir := lookPath(t), t.TempDir()
	p, err := redisproc.Start(ctxT(t), redisproc.Options{Dir: dir, Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	if err := c.Set(ctxT(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the server exited")
	}
	_, ps, _ := net.SplitHostPort(p.Addr)
	port, _ := strconv.Atoi(ps)
	q, err := redisproc.Start(ctxT(t), redisproc.Options{Dir: dir, Bin: bin, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Kill)
	if v, err := c.Get(ctxT(t), "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
}

func lookPath(t *testing.T) string {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: run scripts/setup.sh (make test does) to install it: %v", err)
	}
	return bin
}
