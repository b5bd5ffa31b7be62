package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	// DefaultTimeout is how long Start waits for the server to listen.
	DefaultTimeout = 30 * time.Second
	// StopWait is how long Stop waits after SIGTERM before SIGKILL.
	StopWait = 5 * time.Second
	// ClusterNodeTimeout is the cluster-node-timeout (ms) of Cluster nodes.
	ClusterNodeTimeout = 5000
)

// ErrNotFound is returned (wrapped) when redis-server is not on PATH.
var ErrNotFound = errors.New("redis-server not found")

// Options configure one redis-server. The zero value of each field but
// Dir means its default.
type Options struct {
	// Dir holds the server's data and its log, redis.log; required,
	// created when missing.
	Dir string
	// Port is the loopback port; default a free one (FreePort, or
	// FreeClusterPort for a Cluster node).
	Port int
	// Bin is the redis-server binary; default the one on PATH.
	Bin string
	// Cluster starts a Redis Cluster node (cluster-enabled, its
	// nodes.conf in Dir, no persistence) instead of a single server.
	Cluster bool
	// Timeout is how long Start waits for the server to listen; default
	// DefaultTimeout.
	Timeout time.Duration
	// TLSCert and TLSKey, both set, make the port speak TLS only (with
	// that PEM certificate and key; clients need no certificate), and
	// the URL rediss://.
	TLSCert, TLSKey string
}

// Proc is a running redis-server. Its methods are safe for concurrent use.
type Proc struct {
	// Addr is its 127.0.0.1:port, URL its redis:// URL, Dir its Options.Dir.
	Addr, URL, Dir string

	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

// Start starts redis-server as opt says and waits until it listens or
// ctx ends. Errors: ErrNotFound (wrapped), a missing Dir, or the server
// exiting or not listening in time (with its log's tail).
func Start(ctx context.Context, opt Options) (*Proc, error) {
	if opt.Dir == "" {
		return nil, errors.New("redisproc: Options.Dir is required")
	}
	bin := opt.Bin
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, err
	}
	port := opt.Port
	if port == 0 {
		var err error
		if opt.Cluster {
			port, err = FreeClusterPort()
		} else {
			port, err = FreePort()
		}
		if err != nil {
			return nil, err
		}
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", opt.Dir, "--save", "", "--protected-mode", "no"}
	scheme := "redis://"
	if opt.TLSCert != "" && opt.TLSKey != "" {
		args = append(args[2:], "--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", opt.TLSCert,
			"--tls-key-file", opt.TLSKey, "--tls-auth-clients", "no")
		scheme = "rediss://"
	}
	if opt.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(opt.Dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(ClusterNodeTimeout), "--appendonly", "no")
	} else {
		args = append(args, "--appendonly", "yes")
	}
	logName := filepath.Join(opt.Dir, "redis.log")
	logf, err := os.Create(logName)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := &Proc{Addr: addr, URL: scheme + addr, Dir: opt.Dir, cmd: cmd, log: logName, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("redis-server exited at start (%s):\n%s", logName, p.logTail())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Kill()
			return nil, fmt.Errorf("redis-server did not listen on %s (%s):\n%s", addr, logName, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTail is the last 2 KiB of the server's log.
func (p *Proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}

// Pid is the server's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the server has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop asks the server to exit (SIGTERM: it flushes its append-only
// file), kills it after StopWait, and waits for it.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopWait):
		p.Kill()
	}
}

// Kill kills the server (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeClusterPort returns a free loopback port whose cluster bus port
// (port + 10000) is free and valid too.
func FreeClusterPort() (int, error) {
	for range 100 {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if port+10000 > 65535 {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		b.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a redis cluster node")
}
