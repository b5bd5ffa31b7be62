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

// section is the master: section of the config file.
type section struct {
	daemon.WithRedis[master.Config] `yaml:",inline"`
	Console                         string `yaml:"console"` // the on-call console's listen address; empty: none
}

// flags are the master's own flags, each setting its key of master:.
var flags = []daemon.Flag{
	{Name: "redis", Usage: daemon.RedisUsage},
	{Name: "console", Usage: "on-call web console listen address; empty: none"},
	{Name: "oncall-token", Usage: "on-call token (default $WILLOW_ONCALL_TOKEN)"},
	{Name: "levels", Key: "levels_file", Usage: "YAML file of flex level plans"},
	{Name: "auto-flex-policy", Usage: "YAML file of the auto-flex policy (default: the shipped one, docs/flex.md)"},
}

// serve starts the master and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *daemon.File[section]) error {
	mc := &f.Service
	if err := d.Secret(&mc.Config.OncallToken, "WILLOW_ONCALL_TOKEN", "on-call token"); err != nil {
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
var run = daemon.Service("master", daemon.NodeOnly, flags, serve)

func main() { daemon.Main(run) }
