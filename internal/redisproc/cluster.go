package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Dirs are the nodes' directories, one per master (at least 3).
	Dirs []string
	// Bin is the redis-server binary, CLI redis-cli; default the ones on
	// PATH.
	Bin, CLI string
}

// Cluster is a running Redis Cluster of masters without replicas.
type Cluster struct {
	// Addrs are the masters' addresses; URL is the redis-cluster:// URL.
	Addrs []string
	URL   string
	// Procs are the masters.
	Procs []*Proc
}

// StartCluster starts one Cluster node per directory, joins them with
// `redis-cli --cluster create` (no replicas) and waits until every node
// sees the whole cluster with all slots served. On error it returns the
// nodes started so far (Kill them) with the error.
func StartCluster(ctx context.Context, opt ClusterOptions) (*Cluster, error) {
	if len(opt.Dirs) < 3 {
		return nil, errors.New("redisproc: a Redis Cluster needs at least 3 masters")
	}
	cli := opt.CLI
	if cli == "" {
		var err error
		if cli, err = exec.LookPath("redis-cli"); err != nil {
			return nil, fmt.Errorf("redis-cli not found: %w", err)
		}
	}
	rc := &Cluster{}
	for i, dir := range opt.Dirs {
		p, err := Start(ctx, Options{Dir: dir, Bin: opt.Bin, Cluster: true})
		if err != nil {
			return rc, fmt.Errorf("cluster node %d: %w", i, err)
		}
		rc.Procs = append(rc.Procs, p)
		rc.Addrs = append(rc.Addrs, p.Addr)
	}
	args := append([]string{"--cluster", "create"}, rc.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return rc, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rc.URL = "redis-cluster://" + strings.Join(rc.Addrs, ",")
	known := fmt.Sprintf("cluster_known_nodes:%d", len(rc.Addrs))
	// Every node must see the whole cluster before clients route.
	for _, a := range rc.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				return rc, fmt.Errorf("redis cluster node %s not ready: %v\n%s", a, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	return rc, nil
}

// Kill kills every node (SIGKILL) and waits for them.
func (rc *Cluster) Kill() {
	for _, p := range rc.Procs {
		p.Kill()
	}
}
