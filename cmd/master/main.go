// Command master runs one Willow master: the registry, Route, flex state,
// drills and the on-call console. Several masters may share one Redis.
//
//	master -config master.yaml
//	master -id master-1 -grpc :7000 -admin :7001 -console :7002 -redis redis://127.0.0.1:6379 -oncall-token T
//	master -config master.yaml -auto-flex-policy autoflex.yaml
//
// The config file has two sections, node: (daemon.NodeSection) and
// master: (master.Config's keys plus redis and console); flags override it.
package main

import (
	"context"

	"willow/cmd/internal/daemon"
	"willow/master"
)

// file is the config file.
type file struct {
	daemon.Sections `yaml:",inline"`
	Master          struct {
		master.Config `yaml:",inline"`
		Redis         string `yaml:"redis"`   // default $WILLOW_REDIS
		Console       string `yaml:"console"` // the on-call console's listen address; empty: none
	} `yaml:"master"`
}

func flags(d *daemon.Daemon, f *file) {
	mc := &f.Master
	d.FS.StringVar(&mc.Console, "console", "", "on-call web console listen address; empty: none")
	d.FS.StringVar(&mc.Redis, "redis", "", "Redis URL: redis://host:port/db, or redis-cluster://h1:port,h2:port,... for a Redis Cluster (default $WILLOW_REDIS)")
	d.FS.StringVar(&mc.OncallToken, "oncall-token", "", "on-call token (default $WILLOW_ONCALL_TOKEN)")
	d.FS.StringVar(&mc.LevelsFile, "levels", "", "YAML file of flex level plans")
	d.FS.StringVar(&mc.AutoFlexPolicy, "auto-flex-policy", "", "YAML file of the auto-flex policy (default: the shipped one, docs/flex.md)")
}

// serve starts the master and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *file) error {
	mc := &f.Master
	if err := d.Secret(&mc.OncallToken, "WILLOW_ONCALL_TOKEN", "on-call token"); err != nil {
		return err
	}
	rdb, err := d.Redis(&mc.Redis)
	if err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		return err
	}
	s, err := master.New(mc.Config, master.Deps{Node: d.Node, Redis: rdb, Logger: d.Log})
	if err != nil {
		return err
	}
	if _, err := d.ServeHTTP("console", mc.Console, s.ConsoleHandler()); err != nil {
		return err
	}
	return d.Serve(ctx, s.Run)
}

// run is the master binary.
var run = daemon.Service("master", flags, serve)

func main() { daemon.Main(run) }
