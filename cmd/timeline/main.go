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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"willow/node"
	"willow/timeline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewMain().Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
}

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
	Node struct {
		ID                string        `yaml:"id"`
		Region            string        `yaml:"region"`
		Zone              string        `yaml:"zone"`
		Group             string        `yaml:"group"`
		GRPC              string        `yaml:"grpc"`
		Admin             string        `yaml:"admin"`
		Master            string        `yaml:"master"`
		HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
		ShutdownGrace     time.Duration `yaml:"shutdown_grace"`
		Capacity          int32         `yaml:"capacity"`
	} `yaml:"node"`
	Timeline struct {
		Redis           string        `yaml:"redis"`
		KeyPrefix       string        `yaml:"key_prefix"`
		MaxInbox        int           `yaml:"max_inbox"`
		ReleaseBatch    int           `yaml:"release_batch"`
		FanoutBatch     int           `yaml:"fanout_batch"`
		IdleInterval    time.Duration `yaml:"idle_interval"`
		RefreshInterval time.Duration `yaml:"refresh_interval"`
		RedisTimeout    time.Duration `yaml:"redis_timeout"`
	} `yaml:"timeline"`
}

// Run parses args, starts the service and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	configF := fs.String("config", "", "YAML config file (sections node: and timeline:)")
	id := fs.String("id", "", "node ID (default tl-1)")
	region := fs.String("region", "", "region; required")
	grpcAddr := fs.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	admin := fs.String("admin", "", "admin HTTP listen address (default 127.0.0.1:0)")
	masterAddr := fs.String("master", "", "master gRPC address (default $WILLOW_MASTER; empty: run without a master)")
	redisURL := fs.String("redis", "", "Redis URL (default $WILLOW_REDIS)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate: serve gRPC over TLS (with -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of -tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle: verify servers with it and require client certificates (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var fc FileConfig
	if *configF != "" {
		b, err := os.ReadFile(*configF)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("config %s: %w", *configF, err)
		}
	}
	override := func(dst *string, flagVal, env string) {
		if flagVal != "" {
			*dst = flagVal
		} else if *dst == "" && env != "" {
			*dst = m.Getenv(env)
		}
	}
	override(&fc.Node.ID, *id, "")
	override(&fc.Node.Region, *region, "")
	override(&fc.Node.GRPC, *grpcAddr, "")
	override(&fc.Node.Admin, *admin, "")
	override(&fc.Node.Master, *masterAddr, "WILLOW_MASTER")
	override(&fc.Timeline.Redis, *redisURL, "WILLOW_REDIS")
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
	opt, err := redis.ParseURL(fc.Timeline.Redis)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var srv *timeline.Server // set before the node runs, read by heartbeats
	nc := fc.Node
	srvTLS, cliTLS, err := node.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{TLS: srvTLS, ClientTLS: cliTLS, ID: nc.ID, Role: "timeline", Region: nc.Region, Zone: nc.Zone, Group: nc.Group,
		GRPCAddr: nc.GRPC, AdminAddr: nc.Admin, MasterAddr: nc.Master, HeartbeatInterval: nc.HeartbeatInterval,
		ShutdownGrace: nc.ShutdownGrace, Capacity: nc.Capacity, Logger: log,
		Gauges: func() map[string]float64 { return srv.Gauges() }})
	if err != nil {
		return err
	}
	tc := fc.Timeline
	srv, err = timeline.New(timeline.Config{
		KeyPrefix: tc.KeyPrefix, MaxInbox: tc.MaxInbox, ReleaseBatch: tc.ReleaseBatch, FanoutBatch: tc.FanoutBatch,
		IdleInterval: tc.IdleInterval, RefreshInterval: tc.RefreshInterval, RedisTimeout: tc.RedisTimeout,
	}, timeline.Deps{Node: n, Redis: rdb, Logger: log})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodeDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { srvDone <- srv.Run(ctx) }()
	if m.Ready != nil {
		m.Ready(n)
	}
	select {
	case <-ctx.Done():
	case err = <-nodeDone:
		nodeDone <- err
	}
	cancel()
	<-srvDone
	if e := <-nodeDone; err == nil {
		err = e
	}
	return err
}
