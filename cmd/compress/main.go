// Command compress runs one Willow compress worker (compress.Server on a
// node), registered with the master, taking codec knobs from it. It runs
// until SIGINT or SIGTERM.
//
//	compress -config compress.yaml
//	compress -id compress-a-1 -region a -grpc :7100 -admin :7101 -master 127.0.0.1:7000 -store /var/lib/willow/store
//	compress -id compress-a-1 -region a -master M -s3-endpoint host:9000 -s3-bucket willow -s3-access-key K -s3-secret-key-file F
//
// The config file has four sections: node: (daemon.NodeSection),
// compress: (compress.Config's keys), store: and limits: (limits.Limits,
// which the upload fronts share). Flags override it.
package main

import (
	"context"
	"fmt"

	"willow/cmd/internal/daemon"
	"willow/compress"
)

// flags are the worker's own flags, each setting its key of compress:.
var flags = []daemon.Flag{
	{Name: "workers", Usage: "concurrent tasks (default: cores)"},
	{Name: "queue", Key: "queue_len", Usage: fmt.Sprintf("tasks waiting for a worker (default %d)", compress.DefaultQueueLen)},
}

// serve starts the worker and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *daemon.File[compress.Config]) error {
	var srv *compress.Server // set before the node runs, read by heartbeats
	f.Node.QueueMs = func() float64 {
		if srv == nil {
			return 0
		}
		return srv.QueueMs()
	}
	if err := d.Start(); err != nil {
		return err
	}
	var err error
	f.Service.Limits, f.Service.Logger = f.Limits, d.Log
	if srv, err = compress.New(f.Service, compress.Deps{Node: d.Node, Store: d.Store}); err != nil {
		return err
	}
	return d.Serve(ctx, srv.Run)
}

// run is the compress binary.
var run = daemon.Service("compress", daemon.Store|daemon.Limits, flags, serve)

func main() { daemon.Main(run) }
