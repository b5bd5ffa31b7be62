package master

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the part of go-redis the master uses: its registry, leader
// lease, drills, flex document and audit log. *redis.Client (one server)
// and *redis.ClusterClient (Redis Cluster) both satisfy it; every master
// key carries one hash tag (Config.KeyPrefix through redisconn.OneSlot),
// so its scripts and transactions keep to one cluster slot.
type Redis interface {
	redis.Scripter // the flex CAS and the leader lease scripts
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SetXX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	MGet(ctx context.Context, keys ...string) *redis.SliceCmd
	SAdd(ctx context.Context, key string, members ...any) *redis.IntCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	SRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	// The registry's change log (registry_sync.go).
	ZRangeByScoreWithScores(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.ZSliceCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	HSet(ctx context.Context, key string, values ...any) *redis.IntCmd
	HDel(ctx context.Context, key string, fields ...string) *redis.IntCmd
	LRange(ctx context.Context, key string, start, stop int64) *redis.StringSliceCmd
	// The node-ID bindings (bind.go).
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	Get(ctx context.Context, key string) *redis.StringCmd
	PExpire(ctx context.Context, key string, expiration time.Duration) *redis.BoolCmd
}

var (
	_ Redis = (*redis.Client)(nil)
	_ Redis = (*redis.ClusterClient)(nil)
)

// controlClient returns a client of its own for the master's control
// plane (the flex document, its audit log and the leader lease), with
// rdb's options but another connection pool, so a flex write or a lease
// renewal never queues behind the registry's traffic for a connection
// (at N = 1000 nodes a flex write timed out so; BenchmarkFleet). close
// closes it; for a Redis it cannot copy, rdb itself comes back and close
// does nothing.
func controlClient(rdb Redis) (ctl Redis, close func()) { return ownPool(rdb, controlPoolSize) }

// heartbeatClient returns the client the heartbeat batches are written
// with: a pool of its own, so that heartbeats never wait for a connection
// behind registrations and registry loads (at N = 5000, 370 Register calls
// of re-registering nodes held the shared pool while 4000 heartbeats
// waited for their batch, and missed their deadline; BenchmarkFleet).
// One batch is in flight at a time (hbbatch.go).
func heartbeatClient(rdb Redis) (Redis, func()) { return ownPool(rdb, heartbeatPoolSize) }

// ownPool returns a client with rdb's options and a pool of size
// connections; for a Redis it cannot copy, rdb itself.
func ownPool(rdb Redis, size int) (Redis, func()) {
	switch c := rdb.(type) {
	case *redis.Client:
		o := *c.Options()
		o.PoolSize = size
		o.PushNotificationProcessor = nil // the original's: a client registers its own handlers
		n := redis.NewClient(&o)
		return n, func() { _ = n.Close() }
	case *redis.ClusterClient:
		o := *c.Options()
		o.PoolSize = size
		o.PushNotificationProcessor = nil
		n := redis.NewClusterClient(&o)
		return n, func() { _ = n.Close() }
	}
	return rdb, func() {}
}

// Pool sizes of the master's own clients: a few flex changes, the lease
// and one pub/sub connection at a time; one heartbeat batch at a time
// (and a spare).
const (
	controlPoolSize   = 4
	heartbeatPoolSize = 2
)
