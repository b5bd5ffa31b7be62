package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/client"
	"willow/cluster"
	"willow/loadgen"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/token"
	"willow/urlsign"
)

// localCluster is a deploy/local cluster started by this test: every
// process it kills or restarts is one of the pids up.sh recorded in
// DIR/run.
type localCluster struct {
	t      *testing.T
	repo   string
	dir    string
	port   int
	file   *cluster.File
	conn   *grpc.ClientConn
	master willowv1.MasterClient
	router *client.Router
	ops    *client.Router // with the on-call token
	client *client.Client
	secret []byte
	// probe uploads acknowledged so far (all steps), checked at the end.
	probeIDs []probed
	probeSeq int
}

// repoRoot is the module root (this package lives one level down).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// freeBase picks a base port free on the loopback IPs the cluster uses
// (each process has its own 127.0.x.y; the whole 127/8 is loopback on
// Linux, which this check also proves).
func freeBase(t *testing.T) int {
	t.Helper()
	if p, err := strconv.Atoi(os.Getenv("WILLOW_LOCAL_PORT")); err == nil && p > 0 {
		return p // the port this machine's user was given
	}
	ips := []string{"127.0.0.11", "127.0.0.12", "127.0.0.20", "127.0.0.21", "127.0.0.30",
		"127.0.1.1", "127.0.1.2", "127.0.1.11", "127.0.1.12", "127.0.1.21", "127.0.1.22",
		"127.0.2.1", "127.0.2.2", "127.0.2.11", "127.0.2.12", "127.0.2.21", "127.0.2.22"}
	for try := 0; try < 50; try++ {
		base := 30000 + 100*rand.IntN(300)
		ok := true
		for _, ip := range ips {
			for _, p := range []int{base, base + 1, base + 2, base + 79, base + 90} {
				l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
				if err != nil {
					if try == 0 && strings.Contains(err.Error(), "assign requested address") {
						t.Fatalf("loopback address %s does not bind here: %v", ip, err)
					}
					ok = false
					break
				}
				l.Close()
			}
			if !ok {
				break
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free base port")
	return 0
}

func startCluster(t *testing.T) *localCluster {
	t.Helper()
	repo := repoRoot(t)
	dir := t.TempDir()
	c := &localCluster{t: t, repo: repo, dir: dir, port: freeBase(t)}
	t.Cleanup(func() {
		out, err := c.script("down.sh").CombinedOutput()
		if err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	start := time.Now()
	if out, err := c.script("up.sh").CombinedOutput(); err != nil {
		c.dumpLogs()
		t.Fatalf("up.sh: %v\n%s", err, out)
	}
	t.Logf("deploy/local up in %v (base port %d)", time.Since(start).Round(time.Millisecond), c.port)
	f, err := cluster.LoadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	c.file = f
	c.secret = []byte(f.UploadSecret)
	if c.conn, err = node.Dial(f.Master, nil, grpc.WithPerRPCCredentials(auth.Bearer(f.OncallToken))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	c.master = willowv1.NewMasterClient(c.conn)
	if c.router, err = client.NewRouter(client.RouterConfig{MasterAddr: f.Master, Region: "a"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.router.Close() })
	// Buffer status and timeline stats are operator calls.
	if c.ops, err = client.NewRouter(client.RouterConfig{MasterAddr: f.Master, Region: "a", Credentials: auth.Bearer(f.OncallToken)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ops.Close() })
	keys, err := urlsign.New(f.URLKeys)
	if err != nil {
		t.Fatalf("cluster.json url_keys: %v", err)
	}
	c.client = &client.Client{Router: c.router, CallTimeout: time.Minute, URLKeys: keys, Token: func(u, b string) (string, error) {
		return token.Sign(c.secret, u, b, time.Now().Add(time.Hour))
	}}
	return c
}

func (c *localCluster) script(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{filepath.Join(c.repo, "deploy/local", name), c.dir}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("WILLOW_LOCAL_PORT=%d", c.port))
	cmd.Dir = c.repo
	return cmd
}

func (c *localCluster) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		c.t.Logf("--- tail of %s:\n%s", filepath.Base(l), b)
	}
}

func (c *localCluster) target() loadgen.Target {
	return loadgen.Target{Client: c.client, Master: c.master, OncallToken: c.file.OncallToken, Conn: c.ops.Conn}
}

func (c *localCluster) pid(name string) int {
	b, err := os.ReadFile(filepath.Join(c.dir, "run", name+".pid"))
	if err != nil {
		c.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		c.t.Fatal(err)
	}
	return pid
}

// gone reports whether pid has exited (or is a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// kill sends SIGKILL to process name (a pid up.sh recorded) and waits
// until it is gone; it returns the kill time.
func (c *localCluster) kill(name string) time.Time {
	c.t.Helper()
	pid := c.pid(name)
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill -9 %s (%d): %v", name, pid, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !gone(pid); {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s (%d) still alive 5 s after SIGKILL", name, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Logf("kill -9 %s (pid %d)", name, pid)
	return at
}

func (c *localCluster) restart(name string) {
	c.t.Helper()
	if out, err := c.script("restart.sh", name).CombinedOutput(); err != nil {
		c.t.Fatalf("restart.sh %s: %v\n%s", name, err, out)
	}
	c.t.Logf("restarted %s (pid %d)", name, c.pid(name))
}

// nodes returns ListNodes by node ID.
func (c *localCluster) nodes() (map[string]*willowv1.NodeStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.master.ListNodes(ctx, &willowv1.ListNodesRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]*willowv1.NodeStatus{}
	for _, n := range resp.GetNodes() {
		out[n.GetNode().GetId()] = n
	}
	return out, nil
}

// waitFor polls ListNodes every 100 ms until cond holds or timeout, and
// returns how long it took.
func (c *localCluster) waitFor(timeout time.Duration, cond func(map[string]*willowv1.NodeStatus) bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		if ns, err := c.nodes(); err == nil && cond(ns) {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), false
}

// waitAllHealthy waits until every service node up.sh started is healthy.
func (c *localCluster) waitAllHealthy(timeout time.Duration) (time.Duration, bool) {
	want := 0
	for _, n := range c.file.Nodes {
		if n.Role != "master" && n.Role != "redis" && n.Role != "s3" {
			want++
		}
	}
	return c.waitFor(timeout, func(ns map[string]*willowv1.NodeStatus) bool {
		h := 0
		for _, n := range ns {
			if n.GetState() == "healthy" {
				h++
			}
		}
		return h >= want
	})
}

func stateOf(id string) func(map[string]*willowv1.NodeStatus) string {
	return func(ns map[string]*willowv1.NodeStatus) string {
		if n, ok := ns[id]; ok {
			return n.GetState()
		}
		return "absent"
	}
}

// setRetries sets the retries knob through the master (as `willow flex
// knob retries=...` does).
func (c *localCluster) setRetries(v string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.master.SetFlex(ctx, &willowv1.SetFlexRequest{Token: c.file.OncallToken,
		Knobs: map[string]string{"retries": v}, Reason: "fault suite: retries=" + v})
	if err != nil {
		c.t.Fatalf("SetFlex retries=%s: %v", v, err)
	}
}

// masterAnswers waits until the master process name alone answers
// ListNodes listing every service node.
func (c *localCluster) masterAnswers(name string, timeout time.Duration) (time.Duration, error) {
	var addr string
	b, err := os.ReadFile(filepath.Join(c.dir, "run", name+".meta"))
	if err != nil {
		return 0, err
	}
	if f := strings.Fields(string(b)); len(f) == 3 {
		addr = f[2]
	}
	want := 0
	for _, n := range c.file.Nodes {
		if n.Role != "master" && n.Role != "redis" && n.Role != "s3" {
			want++
		}
	}
	conn, err := node.Dial(addr, nil, grpc.WithPerRPCCredentials(auth.Bearer(c.file.OncallToken)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := mc.ListNodes(ctx, &willowv1.ListNodesRequest{})
		cancel()
		if err == nil && len(resp.GetNodes()) >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			if err == nil {
				err = fmt.Errorf("lists %d nodes, want %d", len(resp.GetNodes()), want)
			}
			return time.Since(start), err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
