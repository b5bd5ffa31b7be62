package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/redisproc"
	"willow/redisconn"
)

// RedisCluster is a real 3-master Redis Cluster on loopback: three
// `redis-server --cluster-enabled yes` children joined by
// `redis-cli --cluster create`.
type RedisCluster struct {
	Addrs []string
	// URL is its redis-cluster:// URL, as -redis takes it.
	URL string

	rc   *redisproc.Cluster
	dirs []string
}

// StartRedisCluster starts a 3-master Redis Cluster (no replicas, no
// persistence) on free loopback ports, waits until every node serves all
// 16384 slots, and stops it at the end of the test. It takes about 3 s
// (redis-cli's own waits); tests that need no fresh cluster share one
// with SharedRedisCluster. A missing redis-server or redis-cli fails the
// test, naming scripts/setup.sh.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	server, cli := LookPath(t, "redis-server"), LookPath(t, "redis-cli")
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	rc, err := startCluster(server, cli, dirs)
	t.Cleanup(rc.Kill)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return rc
}

// startCluster starts the cluster through internal/redisproc; on error
// the returned cluster holds the nodes started so far (Kill it).
func startCluster(server, cli string, dirs []string) (*RedisCluster, error) {
	c, err := redisproc.StartCluster(context.Background(), redisproc.ClusterOptions{Dirs: dirs, Bin: server, CLI: cli})
	rc := &RedisCluster{rc: c, dirs: dirs}
	if c != nil {
		rc.Addrs, rc.URL = c.Addrs, c.URL
	}
	return rc, err
}

// Client returns a go-redis cluster client for it (through
// redisconn.Open, as the services make theirs), closed at the end of the
// test.
func (rc *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c, err := redisconn.Open(rc.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*redis.ClusterClient)
}

// Kill stops every node with SIGKILL and waits for them.
func (rc *RedisCluster) Kill() {
	if rc.rc != nil {
		rc.rc.Kill()
	}
}

// flush empties every master.
func (rc *RedisCluster) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range rc.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		err := c.FlushAll(ctx).Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("flush %s: %w", a, err)
		}
	}
	return nil
}

// shared is the test binary's one shared cluster (test infrastructure:
// starting a cluster costs seconds, so the tests of a package share one).
var shared struct {
	mu sync.Mutex // guards rc
	rc *RedisCluster
}

// SharedRedisCluster returns this test binary's shared 3-master Redis
// Cluster, started on first use and emptied (FLUSHALL on every master)
// for each caller. Tests using it must not run in parallel with each
// other. Main stops it when the tests end; without Main its nodes die
// with the test binary (Pdeathsig) and leave their small temp dirs.
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	server, cli := LookPath(t, "redis-server"), LookPath(t, "redis-cli")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.rc != nil {
		if err := shared.rc.flush(); err == nil {
			return shared.rc
		}
		stopShared() // killed by a test, or broken: start afresh
	}
	var dirs []string
	for range 3 {
		d, err := os.MkdirTemp("", "willow-rediscluster-")
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	rc, err := startCluster(server, cli, dirs)
	shared.rc = rc
	if err != nil {
		stopShared()
		t.Fatalf("testenv: %v", err)
	}
	return rc
}

// stopShared kills the shared cluster and removes its dirs; shared.mu is
// held.
func stopShared() {
	if shared.rc == nil {
		return
	}
	shared.rc.Kill()
	for _, d := range shared.rc.dirs {
		_ = os.RemoveAll(d)
	}
	shared.rc = nil
}

// Main runs the tests and then stops what they shared (the shared Redis
// Cluster). Use it as func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	shared.mu.Lock()
	stopShared()
	shared.mu.Unlock()
	return code
}

// RedisTarget is one kind of Redis a test runs against.
type RedisTarget struct {
	// Kind is "server" or "cluster".
	Kind string
	// URL is its -redis URL.
	URL string
	// Client returns a new client for it, closed at the end of the test.
	Client func(t testing.TB) redis.UniversalClient
	// Kill stops it (every node) with SIGKILL.
	Kill func()
}

// RedisKinds names the kinds of Redis ForEachRedis runs against.
var RedisKinds = []string{"server", "cluster"}

// StartRedisKind starts a redis-server ("server") or returns the shared
// Redis Cluster, emptied ("cluster").
func StartRedisKind(t testing.TB, kind string) RedisTarget {
	t.Helper()
	switch kind {
	case "server":
		r := StartRedis(t)
		return RedisTarget{Kind: kind, URL: r.URL, Kill: r.Kill,
			Client: func(t testing.TB) redis.UniversalClient { return r.Client(t) }}
	case "cluster":
		rc := SharedRedisCluster(t)
		return RedisTarget{Kind: kind, URL: rc.URL, Kill: rc.Kill,
			Client: func(t testing.TB) redis.UniversalClient { return rc.Client(t) }}
	}
	t.Fatalf("testenv: unknown redis kind %q", kind)
	return RedisTarget{}
}

// ForEachRedis runs f as subtests "server" (a fresh redis-server) and
// "cluster" (the shared 3-master Redis Cluster, emptied).
func ForEachRedis(t *testing.T, f func(t *testing.T, r RedisTarget)) {
	t.Helper()
	for _, kind := range RedisKinds {
		t.Run(kind, func(t *testing.T) { f(t, StartRedisKind(t, kind)) })
	}
}

// FlushAll empties c: the server, or every master of a cluster.
func FlushAll(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		})
	}
	return c.FlushAll(ctx).Err()
}
