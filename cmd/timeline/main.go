// Command timeline runs one Willow timeline service: follower fan-out,
// the ratio-based delay of new-post notifications and their capped
// release, all state in Redis. Several may share one Redis. It runs until
// SIGINT or SIGTERM.
//
//	timeline -config timeline.yaml
//	timeline -region a -grpc :7300 -admin :7301 -master 127.0.0.1:7000 -redis redis://127.0.0.1:6379
//
// The config file has two sections: node: (daemon.NodeSection) and
// timeline: (timeline.Config's keys plus redis). Flags override it.
package main

import (
	"context"

	"willow/cmd/internal/daemon"
	"willow/timeline"
)

// section is the timeline: section of the config file.
type section = daemon.WithRedis[timeline.Config]

// serve starts the service and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *daemon.File[section]) error {
	tc := &f.Service
	rdb, err := d.Redis(&tc.Redis)
	if err != nil {
		return err
	}
	var srv *timeline.Server // set before the node runs, read by heartbeats
	f.Node.Gauges = func() map[string]float64 { return srv.Gauges() }
	if err := d.Start(); err != nil {
		return err
	}
	deps := timeline.Deps{Node: d.Node, Redis: rdb, Logger: d.Log}
	if d.Router != nil {
		deps.Media = timeline.UploadMedia{Router: d.Router} // Publish checks media owners on the upload fronts
	}
	if srv, err = timeline.New(tc.Config, deps); err != nil {
		return err
	}
	return d.Serve(ctx, srv.Run)
}

// run is the timeline binary.
var run = daemon.Service("timeline", daemon.NodeOnly, []daemon.Flag{{Name: "redis", Usage: daemon.RedisUsage}}, serve)

func main() { daemon.Main(run) }
