package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"willow/internal/redisproc"
)

// RedisProc is a redis-server child process with its data in a directory
// (package internal/redisproc, which the tests' testenv starts Redis
// through too).
type RedisProc = redisproc.Proc

// StartRedis starts redis-server on a free loopback port with its data
// (append-only file, fsync every second) in dir. The child dies with this
// process (Pdeathsig) and is stopped by Stop.
func StartRedis(ctx context.Context, dir string) (*RedisProc, error) {
	p, err := redisproc.Start(ctx, redisproc.Options{Dir: dir, Timeout: 15 * time.Second})
	if errors.Is(err, redisproc.ErrNotFound) {
		return nil, fmt.Errorf("%w (run scripts/setup.sh, or pass --redis URL)", err)
	}
	return p, err
}
