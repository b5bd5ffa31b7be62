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
	"willow/limits"
)

func main() { daemon.Main("compress", run) }

type file struct {
	Node     daemon.NodeSection `yaml:"node"`
	Store    daemon.StoreConfig `yaml:"store"`
	Limits   limits.Limits      `yaml:"limits"`
	Compress compress.Config    `yaml:"compress"`
}

// run parses args, starts the worker and serves until ctx is done.
func run(ctx context.Context, p daemon.Process, args []string) error {
	d, f := daemon.New("compress", p), &file{}
	d.FS.IntVar(&f.Compress.Workers, "workers", 0, "concurrent tasks (default: cores)")
	d.FS.IntVar(&f.Compress.QueueLen, "queue", 0, fmt.Sprintf("tasks waiting for a worker (default %d)", compress.DefaultQueueLen))
	if err := d.Parse(args, f, &f.Node, &f.Store); err != nil {
		return err
	}
	defer d.Close()
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
	f.Compress.Limits, f.Compress.Logger = f.Limits, d.Log
	if srv, err = compress.New(f.Compress, compress.Deps{Node: d.Node, Store: d.Store}); err != nil {
		return err
	}
	return d.Serve(ctx, srv.Run)
}
