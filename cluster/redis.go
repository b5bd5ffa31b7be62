package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// RedisProc is a redis-server child process with its data in a directory.
type RedisProc struct {
	cmd  *exec.Cmd
	URL  string
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port with its data
// (append-only file, fsync every second) in dir. The child dies with this
// process (Pdeathsig) and is stopped by Stop.
func StartRedis(ctx context.Context, dir string) (*RedisProc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (run scripts/setup.sh, or pass --redis URL): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--save", "", "--protected-mode", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &RedisProc{cmd: cmd, URL: fmt.Sprintf("redis://127.0.0.1:%d", port), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(r.done) }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return r, nil
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("redis-server exited at start; see %s", logf.Name())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.Stop()
			return nil, fmt.Errorf("redis-server did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop asks redis-server to exit (SIGTERM: it flushes its append-only
// file), then kills it after 5 s.
func (r *RedisProc) Stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
