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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"willow/master"
	"willow/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewMain().Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "master:", err)
		os.Exit(1)
	}
}

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
	Node struct {
		ID                string        `yaml:"id"`
		Zone              string        `yaml:"zone"`
		GRPC              string        `yaml:"grpc"`
		Admin             string        `yaml:"admin"`
		HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
		ShutdownGrace     time.Duration `yaml:"shutdown_grace"`
	} `yaml:"node"`
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
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	configF := fs.String("config", "", "YAML config file (sections node: and master:)")
	id := fs.String("id", "", "node ID (default master-1)")
	grpcAddr := fs.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	admin := fs.String("admin", "", "admin HTTP listen address (default 127.0.0.1:0)")
	console := fs.String("console", "", "on-call web console listen address; empty: none")
	redisURL := fs.String("redis", "", "Redis URL (default $WILLOW_REDIS)")
	token := fs.String("oncall-token", "", "on-call token (default $WILLOW_ONCALL_TOKEN)")
	levels := fs.String("levels", "", "YAML file of flex level plans")
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
	override(&fc.Node.GRPC, *grpcAddr, "")
	override(&fc.Node.Admin, *admin, "")
	override(&fc.Master.Console, *console, "")
	override(&fc.Master.Redis, *redisURL, "WILLOW_REDIS")
	override(&fc.Master.OncallToken, *token, "WILLOW_ONCALL_TOKEN")
	override(&fc.Master.LevelsFile, *levels, "")
	if fc.Node.ID == "" {
		fc.Node.ID = "master-1"
	}
	if fc.Master.Redis == "" {
		return errors.New("need -redis URL (or master.redis in the config, or $WILLOW_REDIS)")
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	opt, err := redis.ParseURL(fc.Master.Redis)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	srvTLS, cliTLS, err := node.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{TLS: srvTLS, ClientTLS: cliTLS, ID: fc.Node.ID, Role: "master", Zone: fc.Node.Zone, GRPCAddr: fc.Node.GRPC,
		AdminAddr: fc.Node.Admin, HeartbeatInterval: fc.Node.HeartbeatInterval, ShutdownGrace: fc.Node.ShutdownGrace, Logger: log})
	if err != nil {
		return err
	}
	mc := fc.Master
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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	nodeDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { srvDone <- s.Run(ctx) }()
	consoleAddr := ""
	if mc.Console != "" {
		l, err := net.Listen("tcp", mc.Console)
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		consoleAddr = l.Addr().String()
		srv := &http.Server{Handler: s.ConsoleHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info("console serving", "addr", consoleAddr)
	}
	if m.Ready != nil {
		m.Ready(n, consoleAddr)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
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
