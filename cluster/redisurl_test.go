package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"willow/cluster"
)

// TestStartBadRedis: a Redis URL the client cannot parse, or a cluster
// nobody answers at, is a one-line error from Start, never a panic (it
// was a nil-pointer panic in Close).
func TestStartBadRedis(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"redis-cluster://", "no host"},
		{"redis-cluster://127.0.0.1:1,,127.0.0.1:2", "empty host"},
		{"redis-cluster://127.0.0.1:1/3", "no database"},
		{"nonsense", "bad redis URL"},
		{"redis://127.0.0.1:1/x", "invalid database"},
		{"redis-cluster://127.0.0.1:1,127.0.0.1:2", "connection refused"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), RedisURL: tt.url})
			if err == nil {
				c.Close()
				t.Fatal("Start succeeded")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line containing %q", msg, tt.want)
			}
		})
	}
}
