package redisconn_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/iostat"
	"willow/internal/redisproc"
	"willow/internal/testenv"
	"willow/redisconn"
)

// TestTLSTrafficCounts runs a real redis-server on a TLS-only port: a
// rediss:// client verifies its certificate against the host it dialled
// and its bytes count in iostat, as plain redis:// traffic does.
func TestTLSTrafficCounts(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := testenv.SelfSignedCert(t, dir, "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := redisproc.Start(ctx, redisproc.Options{Dir: filepath.Join(dir, "redis"), TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatalf("%v (redis-server comes from scripts/setup.sh)", err)
	}
	defer p.Stop()
	if !strings.HasPrefix(p.URL, "rediss://") {
		t.Fatalf("URL %q, want rediss://", p.URL)
	}

	// An untrusted certificate is refused.
	c, err := redisconn.Open(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("ping with an unknown CA: %v, want a certificate error", err)
	}
	c.Close()

	c, err = redisconn.Open(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*redis.Client).Options().TLSConfig.RootCAs = pool
	out0, in0 := iostat.DialedOut(), iostat.DialedIn()
	value := strings.Repeat("w", 64<<10)
	if err := c.Set(ctx, "k", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != value {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	// Closing flushes the counters a connection batches.
	c.Close()
	if out := iostat.DialedOut() - out0; out < int64(len(value)) {
		t.Errorf("counted %d bytes out, want at least %d", out, len(value))
	}
	if in := iostat.DialedIn() - in0; in < int64(len(value)) {
		t.Errorf("counted %d bytes in, want at least %d", in, len(value))
	}
}
