// Command master runs one Willow master: the registry, Route, flex state,
// drills and the on-call console. Several masters may share one Redis.
//
//	master -config master.yaml
//	master -id master-1 -grpc :7000 -admin :7001 -console :7002 -redis redis://127.0.0.1:6379 -oncall-token T
//
// The config file has two sections, node: (the runtime) and master:
// (master.Config plus redis and console); flags override it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"willow/cmd/internal/daemon"
	"willow/master"
	"willow/node"
	"willow/redisconn"
)

func main() { daemon.Main("master", NewMain().Run) }

// Main runs a master; tests run it in process.
type Main struct {
	Stderr io.Writer
	Getenv func(string) string
	// Ready, when set, is called with the listening node and the console
	// address once the master serves.
	Ready func(n *node.Node, consoleAddr string)
}

// NewMain returns a Main on the process's environment.
func NewMain() *Main { return &Main{Stderr: os.Stderr, Getenv: os.Getenv} }

// FileConfig is the YAML config file.
type FileConfig struct {
	Node   daemon.NodeConfig `yaml:"node"`
	Master struct {
		Redis            string        `yaml:"redis"`
		Console          string        `yaml:"console"`
		OncallToken      string        `yaml:"oncall_token"`
		LevelsFile       string        `yaml:"levels_file"`
		KeyPrefix        string        `yaml:"key_prefix"`
		MissedAfter      time.Duration `yaml:"missed_after"`
		MinRequests      int64         `yaml:"min_requests"`
		MinSuccessRate   float64       `yaml:"min_success_rate"`
		SuccessWindow    time.Duration `yaml:"success_window"`
		MaxEjectFraction float64       `yaml:"max_eject_fraction"`
		Protection       time.Duration `yaml:"protection"`
		MaxProtection    time.Duration `yaml:"max_protection"`
		ProbeInterval    time.Duration `yaml:"probe_interval"`
		ProbeSuccesses   int           `yaml:"probe_successes"`
		RouteTTL         time.Duration `yaml:"route_ttl"`
		LeaseTTL         time.Duration `yaml:"lease_ttl"`
	} `yaml:"master"`
}

// Run parses args, starts the master and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	f := daemon.NewFlags("master", m.Stderr, false)
	console := f.FS.String("console", "", "on-call web console listen address; empty: none")
	redisURL := f.FS.String("redis", "", "Redis URL: redis://host:port/db, or redis-cluster://h1:port,h2:port,... for a Redis Cluster (default $WILLOW_REDIS)")
	token := f.FS.String("oncall-token", "", "on-call token (default $WILLOW_ONCALL_TOKEN)")
	levels := f.FS.String("levels", "", "YAML file of flex level plans")
	var fc FileConfig
	if err := f.Parse(args, &fc, &fc.Node, nil, nil); err != nil {
		return err
	}
	mc := &fc.Master
	daemon.Override(&mc.Console, *console)
	daemon.Override(&mc.Redis, *redisURL)
	daemon.Override(&mc.OncallToken, *token)
	daemon.Override(&mc.LevelsFile, *levels)
	if mc.Redis == "" {
		mc.Redis = m.Getenv("WILLOW_REDIS")
	}
	if mc.OncallToken == "" {
		mc.OncallToken = m.Getenv("WILLOW_ONCALL_TOKEN")
	}
	if err := daemon.RefusePlaceholder("on-call token", mc.OncallToken); err != nil {
		return err
	}
	if fc.Node.ID == "" {
		fc.Node.ID = "master-1"
	}
	if mc.Redis == "" {
		return errors.New("need -redis URL (or master.redis in the config, or $WILLOW_REDIS)")
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	rdb, err := redisconn.Open(mc.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	fc.Node.Region, fc.Node.Master = "", ""
	ncfg, err := f.NodeConfig("master", fc.Node, log)
	if err != nil {
		return err
	}
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	s, err := master.New(master.Config{
		OncallToken: mc.OncallToken, LevelsFile: mc.LevelsFile, KeyPrefix: mc.KeyPrefix,
		MissedAfter: mc.MissedAfter, MinRequests: mc.MinRequests, MinSuccessRate: mc.MinSuccessRate,
		SuccessWindow: mc.SuccessWindow, MaxEjectFraction: mc.MaxEjectFraction, Protection: mc.Protection,
		MaxProtection: mc.MaxProtection, ProbeInterval: mc.ProbeInterval, ProbeSuccesses: mc.ProbeSuccesses,
		RouteTTL: mc.RouteTTL, LeaseTTL: mc.LeaseTTL,
	}, master.Deps{Node: n, Redis: rdb, Logger: log})
	if err != nil {
		return err
	}
	loops := []func(context.Context) error{s.Run}
	consoleAddr := ""
	if mc.Console != "" {
		l, err := net.Listen("tcp", mc.Console)
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		consoleAddr = l.Addr().String()
		loops = append(loops, func(ctx context.Context) error { return serveConsole(ctx, l, s.ConsoleHandler()) })
		log.Info("console serving", "addr", consoleAddr)
	}
	return daemon.Serve(ctx, n, func() {
		if m.Ready != nil {
			m.Ready(n, consoleAddr)
		}
	}, loops...)
}

// serveConsole serves the console on l until ctx is done, then shuts it
// down gracefully.
func serveConsole(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}
