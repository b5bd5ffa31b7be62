// Command edgecache runs one edge cache (OC) node: HTTP GET/HEAD
// /m/{id}/{variant} and gRPC EdgeCache.Get, filled from the object store or
// buffer pool 2, sharded among the OC's nodes by a consistent hash ring. It
// runs until SIGINT or SIGTERM.
//
//	edgecache -config edge.yaml
//	edgecache -id edge-a-1 -region a -grpc :7300 -http :8080 -master 127.0.0.1:7000 -capacity 268435456 -store /var/lib/willow/store
//	edgecache -id edge-a-1 -region a -master M -s3-endpoint 127.0.0.1:9000 -s3-bucket willow -s3-access-key K -s3-secret-key-file F
//
// The config file has three sections: node: (daemon.NodeSection),
// edgecache: (edgecache.Config's keys) and store:. Flags override it.
package main

import (
	"context"

	"willow/cmd/internal/daemon"
	"willow/edgecache"
	"willow/flex"
)

// flags are the node's own flags, each setting its key of edgecache:.
var flags = []daemon.Flag{
	{Name: "http", Usage: "HTTP listen address for GET/HEAD /m/{id}/{variant} (default 127.0.0.1:0)"},
	{Name: "capacity", Key: "capacity_bytes", Usage: "memory cache capacity in bytes (default 256 MiB)"},
	{Name: "disk-dir", Usage: "disk tier directory, kept across restarts (default: no disk tier)"},
}

// serve starts the node and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *daemon.File[edgecache.Config]) error {
	ec := &f.Service
	if ec.PublicBusinesses == nil {
		ec.PublicBusinesses = flex.PublicBusinesses()
	}
	if len(ec.URLKeys) == 0 {
		d.Log.Warn("no url_keys: downloads are not signed, every media item is served to anyone (development only)")
	}
	if err := d.Start(); err != nil {
		return err
	}
	deps := edgecache.Deps{Node: d.Node, Store: d.Store}
	if d.Router != nil {
		deps.Router = d.Router
	}
	s, err := edgecache.New(*ec, deps)
	if err != nil {
		return err
	}
	return d.Serve(ctx, s.Run)
}

// run is the edgecache binary.
var run = daemon.Service("edgecache", daemon.Store, flags, serve)

func main() { daemon.Main(run) }
