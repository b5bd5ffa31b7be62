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
