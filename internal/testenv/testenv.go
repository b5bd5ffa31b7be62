// Package testenv starts the real components tests need — redis-server (a
// single server or a 3-master Redis Cluster, through internal/redisproc,
// the code the one-box cluster starts its Redis with) and the versitygw S3
// gateway — as child processes on free loopback ports, and stops them when
// the test ends. A missing binary fails the test with a
// message naming scripts/setup.sh; it never skips silently.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"

	"willow/internal/redisproc"
)

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// LookPath finds a binary on PATH or in $(go env GOPATH)/bin, or fails the
// test saying how to install it.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", name); isExec(p) {
		return p
	}
	t.Fatalf("testenv: %s not found: run scripts/setup.sh (make test does) to install it", name)
	return ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}

// Proc is a child process started for a test.
type Proc struct {
	Cmd  *exec.Cmd
	Addr string
	Dir  string
}

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	if p.Cmd.Process != nil {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		_ = p.Cmd.Wait()
	}
}

func start(t testing.TB, name string, cmd *exec.Cmd, addr string) *Proc {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	p := &Proc{Cmd: cmd, Addr: addr}
	t.Cleanup(p.Kill)
	if err := WaitTCP(addr, 60*time.Second); err != nil {
		out, _ := os.ReadFile(logf.Name())
		t.Fatalf("testenv: %s did not listen on %s: %v\n%s", name, addr, err, out)
	}
	return p
}

// WaitTCP waits until addr accepts TCP connections.
func WaitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Redis is a redis-server child process, started through
// internal/redisproc (the code cluster.StartRedis starts the one-box
// cluster's Redis with): Addr, URL, Dir, Kill, Stop.
type Redis struct {
	*redisproc.Proc
}

// Client returns a go-redis client for it, closed at the end of the test.
func (r *Redis) Client(t testing.TB) *redis.Client {
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// StartRedis starts redis-server on a free port with data under a temp
// dir (appendonly, fsync every second).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return StartRedisAt(t, t.TempDir(), FreePort(t))
}

// StartRedisAt starts redis-server with its data in dir on port, so a test
// can stop and restart it with the same data. It is killed at the end of
// the test.
func StartRedisAt(t testing.TB, dir string, port int) *Redis {
	t.Helper()
	p, err := redisproc.Start(context.Background(), redisproc.Options{Dir: dir, Port: port, Bin: LookPath(t, "redis-server"), Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(p.Kill)
	return &Redis{Proc: p}
}

// S3 is a versitygw S3 gateway child process.
type S3 struct {
	*Proc
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
}

// Client returns a minio-go client for it.
func (s *S3) Client(t testing.TB) *minio.Client {
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Secure: false})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartS3 starts versitygw (posix backend) on a free port with its data
// under a temp dir.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	return StartS3At(t, t.TempDir(), FreePort(t))
}

// StartS3At starts versitygw with its data in dir on port.
func StartS3At(t testing.TB, dir string, port int) *S3 {
	t.Helper()
	bin := LookPath(t, "versitygw")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--port", addr, "posix", dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY=willowtest", "ROOT_SECRET_KEY=willowtestsecret")
	p := start(t, "versitygw", cmd, addr)
	p.Dir = dir
	s := &S3{Proc: p, Endpoint: addr, AccessKey: "willowtest", SecretKey: "willowtestsecret"}
	// Wait until it answers S3 calls, not just TCP.
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := c.ListBuckets(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("testenv: versitygw not answering: %v", err)
		}
		if !strings.Contains(err.Error(), "connection refused") {
			// any S3-level answer means it is up
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}
