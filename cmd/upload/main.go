// Command upload runs one Willow upload front (upload.Server on a node): staging,
// buffer pools, object store, the tus / IETF HTTP endpoint and, optionally, Redis
// for the compress journal. SIGTERM retires it (pools drained, jobs handed over).
//
//	upload -region a -master M -secret S -staging DIR -pool-dir DIR -store DIR -http :8200 [-redis URL]
//
// -config FILE: sections node: (daemon.NodeSection), upload: (upload.Config's keys
// plus secret, pool_dir, redis, http), store: and limits: (shared with compress).
package main

import (
	"cmp"
	"context"

	"willow/cmd/internal/daemon"
	"willow/upload"
)

// section is the upload: section of the config file.
type section struct {
	upload.Config `yaml:",inline"`
	Secret        string            `yaml:"secret"`   // the upload-token secret; default $WILLOW_UPLOAD_SECRET
	PoolDir       string            `yaml:"pool_dir"` // pool1/ and pool2/ under it; empty: no pools
	Redis         string            `yaml:"redis"`    // the compress journal; default $WILLOW_REDIS, none: in the staging dir
	HTTP          upload.HTTPConfig `yaml:"http"`
}

// flags are the front's own flags, each setting its key of upload:.
var flags = []daemon.Flag{
	{Name: "redis", Usage: "Redis URL for the compress journal: redis://host:port/db or redis-cluster://h1:port,h2:port,... (default $WILLOW_REDIS; none: journal in the staging dir)"},
	{Name: "secret", Usage: "upload-token HMAC secret (default $WILLOW_UPLOAD_SECRET)"},
	{Name: "staging", Usage: "staging directory (required)"},
	{Name: "pool-dir", Usage: "buffer pool directory (pool1/, pool2/); empty disables the pools"},
	{Name: "http", Key: "http.addr", Usage: "listen address of the tus / IETF resumable-upload HTTP endpoint (default 127.0.0.1:0)"},
	{Name: "cors-origins", Key: "http.cors_origins", Usage: "comma-separated origins browsers may upload from over HTTP (* for any)"},
	{Name: "retire-keep-pool1", Usage: "on SIGTERM, keep pool 1 in place (its volume comes back) instead of draining it; pool 2 is always drained"},
	{Name: "commit-wait", Usage: "how long Commit waits for the first compress attempt to list variants (default 5s, at most the compress timeout; negative: do not wait)"},
}

// serve starts the front and serves until ctx is done.
func serve(ctx context.Context, d *daemon.Daemon, f *daemon.File[section]) error {
	u := &f.Service
	if err := d.Secret(&u.Secret, "WILLOW_UPLOAD_SECRET", "upload secret"); err != nil {
		return err
	}
	f.Node.UploadSecret = cmp.Or(f.Node.UploadSecret, u.Secret) // calls carry tokens the front issues
	if err := d.Start(); err != nil {
		return err
	}
	deps := upload.Deps{Node: d.Node, Store: d.Store, Router: d.Router}
	var err error
	if deps.Pool1, deps.Pool2, err = d.Pools(u.PoolDir); err != nil {
		return err
	}
	if deps.Redis, err = d.OptionalRedis(&u.Redis); err != nil {
		return err
	}
	u.Config.Secret, u.Limits, u.Logger = []byte(u.Secret), f.Limits, d.Log
	srv, err := upload.New(u.Config, deps)
	if err != nil {
		return err
	}
	hs, err := upload.NewHTTP(srv, u.HTTP)
	if err != nil {
		return err
	}
	rctx, stop := daemon.Retiring(ctx, d.Log, func(ctx context.Context) error { _, err := srv.Retire(ctx); return err })
	defer stop()
	return d.Serve(rctx, srv.Run, hs.Run)
}

// run is the upload binary.
var run = daemon.Service("upload", daemon.Store|daemon.Limits, flags, serve)

func main() { daemon.Main(run) }
