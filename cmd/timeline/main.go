// Command timeline runs one Willow timeline service: follower fan-out,
// the ratio-based delay of new-post notifications and their capped
// release, all state in Redis. Several may share one Redis.
//
//	timeline -config timeline.yaml
//	timeline -id tl-1 -region a -grpc :7300 -admin :7301 -master 127.0.0.1:7000 -redis redis://127.0.0.1:6379
//
// The config file has two sections, node: (the runtime) and timeline:
// (timeline.Config plus redis); flags override it. It runs until SIGTERM.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"willow/client"
	"willow/cmd/internal/daemon"
	"willow/node"
	"willow/redisconn"
	"willow/timeline"
	"willow/urlsign"
)

func main() { daemon.Main("timeline", NewMain().Run) }

// Main runs a timeline service; tests run it in process.
type Main struct {
	Stderr io.Writer
	Getenv func(string) string
	// Ready, when set, is called with the listening node once it serves.
	Ready func(n *node.Node)
}

// NewMain returns a Main on the process's environment.
func NewMain() *Main { return &Main{Stderr: os.Stderr, Getenv: os.Getenv} }

// FileConfig is the YAML config file.
type FileConfig struct {
	Node     daemon.NodeConfig `yaml:"node"`
	Timeline struct {
		Redis           string        `yaml:"redis"`
		KeyPrefix       string        `yaml:"key_prefix"`
		MaxInbox        int           `yaml:"max_inbox"`
		ReleaseBatch    int           `yaml:"release_batch"`
		FanoutBatch     int           `yaml:"fanout_batch"`
		IdleInterval    time.Duration `yaml:"idle_interval"`
		RefreshInterval time.Duration `yaml:"refresh_interval"`
		RedisTimeout    time.Duration `yaml:"redis_timeout"`
		URLKeys         []urlsign.Key `yaml:"url_keys"`
		URLTTL          time.Duration `yaml:"url_ttl"`
	} `yaml:"timeline"`
}

// Run parses args, starts the service and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	f := daemon.NewFlags("timeline", m.Stderr, false)
	redisURL := f.FS.String("redis", "", "Redis URL: redis://host:port/db, or redis-cluster://h1:port,h2:port,... for a Redis Cluster (default $WILLOW_REDIS)")
	var fc FileConfig
	if err := f.Parse(args, &fc, &fc.Node, nil, nil); err != nil {
		return err
	}
	daemon.Override(&fc.Timeline.Redis, *redisURL)
	if fc.Node.Master == "" {
		fc.Node.Master = m.Getenv("WILLOW_MASTER")
	}
	if fc.Timeline.Redis == "" {
		fc.Timeline.Redis = m.Getenv("WILLOW_REDIS")
	}
	if fc.Node.ID == "" {
		fc.Node.ID = "tl-1"
	}
	if fc.Node.Region == "" {
		return errors.New("need -region (or node.region in the config)")
	}
	if fc.Timeline.Redis == "" {
		return errors.New("need -redis URL (or timeline.redis in the config, or $WILLOW_REDIS)")
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	rdb, err := redisconn.Open(fc.Timeline.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	var srv *timeline.Server // set before the node runs, read by heartbeats
	ncfg, err := f.NodeConfig("timeline", fc.Node, log)
	if err != nil {
		return err
	}
	ncfg.Gauges = func() map[string]float64 { return srv.Gauges() }
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	tc := fc.Timeline
	deps := timeline.Deps{Node: n, Redis: rdb, Logger: log}
	if fc.Node.Master != "" {
		// Publish checks media owners on the upload fronts.
		r, err := client.NewRouter(client.RouterConfig{TLS: ncfg.ClientTLS, Credentials: n.Credentials(), MasterAddr: fc.Node.Master, Region: fc.Node.Region})
		if err != nil {
			return err
		}
		defer r.Close()
		deps.Media = timeline.UploadMedia{Router: r}
	}
	srv, err = timeline.New(timeline.Config{
		KeyPrefix: tc.KeyPrefix, MaxInbox: tc.MaxInbox, ReleaseBatch: tc.ReleaseBatch, FanoutBatch: tc.FanoutBatch,
		IdleInterval: tc.IdleInterval, RefreshInterval: tc.RefreshInterval, RedisTimeout: tc.RedisTimeout,
		URLKeys: tc.URLKeys, URLTTL: tc.URLTTL,
	}, deps)
	if err != nil {
		return err
	}
	return daemon.Serve(ctx, n, func() {
		if m.Ready != nil {
			m.Ready(n)
		}
	}, srv.Run)
}
