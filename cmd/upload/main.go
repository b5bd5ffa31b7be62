// Command upload runs one Willow upload front (upload.Server on a node),
// registered with the master, with its staging dir, buffer pools, object
// store and (optionally) Redis for the compress journal.
//
//	upload -config upload.yaml
//	upload -id upload-a-1 -region a -grpc :7200 -admin :7201 -master 127.0.0.1:7000 \
//	       -secret S -staging /var/lib/willow/staging -pool-dir /var/lib/willow/pools -store /var/lib/willow/store
//	upload ... -http :8200 -cors-origins https://app.example  (tus / IETF resumable uploads at http://HOST:8200/files/)
//	upload ... -s3-endpoint host:9000 -s3-bucket willow -s3-access-key K -s3-secret-key S -redis redis://127.0.0.1:6379
//
// The config file has four sections, node: (the runtime), upload:
// (upload.Config), store: (directory or S3) and limits: (limits.Limits,
// the same section the compress workers read); flags override it. The
// secret may also come from $WILLOW_UPLOAD_SECRET. It runs until SIGINT or
// SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"willow/buffer"
	"willow/client"
	"willow/cmd/internal/daemon"
	"willow/limits"
	"willow/node"
	"willow/redisconn"
	"willow/upload"
)

func main() { daemon.Main("upload", NewMain().Run) }

// Main runs an upload front; tests run it in process.
type Main struct {
	Stderr io.Writer
	Getenv func(string) string
	// Ready, when set, is called with the listening node once it serves.
	Ready func(n *node.Node)
}

// NewMain returns a Main writing logs to stderr.
func NewMain() *Main { return &Main{Stderr: os.Stderr, Getenv: os.Getenv} }

// FileConfig is the YAML config file.
type FileConfig struct {
	Node daemon.NodeConfig `yaml:"node"`
	// Limits are the media limits, the same section as the compress
	// workers' config.
	Limits limits.Limits `yaml:"limits"`
	Upload struct {
		Secret          string        `yaml:"secret"`
		Staging         string        `yaml:"staging"`
		PoolDir         string        `yaml:"pool_dir"` // pool1/ and pool2/ under it; empty disables the pools
		Redis           string        `yaml:"redis"`
		CompressTimeout time.Duration `yaml:"compress_timeout"`
		CommitWait      time.Duration `yaml:"commit_wait"`
		StoreTimeout    time.Duration `yaml:"store_timeout"`
		StagingTTL      time.Duration `yaml:"staging_ttl"`
		StagingBudget   int64         `yaml:"staging_budget_bytes"`
		RetryMin        time.Duration `yaml:"retry_min"`
		RetryMax        time.Duration `yaml:"retry_max"`
		RetireTimeout   time.Duration `yaml:"retire_timeout"`
		RetireKeepPool1 bool          `yaml:"retire_keep_pool1"`
		// Caller limits (docs/security.md).
		ChunkIdleTimeout  time.Duration `yaml:"chunk_idle_timeout"`
		MaxStreamsPerConn int           `yaml:"max_streams_per_conn"`
		MaxStreamsPerUser int           `yaml:"max_streams_per_user"`
		MaxStagedPerConn  int           `yaml:"max_staged_per_conn"`
		MaxStagedPerUser  int           `yaml:"max_staged_per_user"`
		// HTTP is the tus / IETF resumable-upload endpoint.
		HTTP upload.HTTPConfig `yaml:"http"`
	} `yaml:"upload"`
	Store struct {
		Dir string          `yaml:"dir"`
		S3  daemon.S3Config `yaml:"s3"`
	} `yaml:"store"`
}

// Run parses args, starts the front and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	f := daemon.NewFlags("upload", m.Stderr, true)
	redisURL := f.FS.String("redis", "", "Redis URL for the compress journal: redis://host:port/db or redis-cluster://h1:port,h2:port,... (default $WILLOW_REDIS; none: journal in the staging dir)")
	secret := f.FS.String("secret", "", "upload-token HMAC secret (default $WILLOW_UPLOAD_SECRET)")
	staging := f.FS.String("staging", "", "staging directory (required)")
	poolDir := f.FS.String("pool-dir", "", "buffer pool directory (pool1/, pool2/); empty disables the pools")
	httpAddr := f.FS.String("http", "", "listen address of the tus / IETF resumable-upload HTTP endpoint (default 127.0.0.1:0)")
	cors := f.FS.String("cors-origins", "", "comma-separated origins browsers may upload from over HTTP (* for any)")
	keepPool1 := f.FS.Bool("retire-keep-pool1", false, "on SIGTERM, keep pool 1 in place (its volume comes back) instead of draining it; pool 2 is always drained")
	commitWait := f.FS.Duration("commit-wait", 0, "how long Commit waits for the first compress attempt to list variants (default 5s, at most the compress timeout; negative: do not wait)")
	var fc FileConfig
	nc, uc, sc := &fc.Node, &fc.Upload, &fc.Store
	if err := f.Parse(args, &fc, nc, &sc.Dir, &sc.S3); err != nil {
		return err
	}
	daemon.Override(&uc.Redis, *redisURL)
	if m.Getenv != nil && uc.Secret == "" {
		uc.Secret = m.Getenv("WILLOW_UPLOAD_SECRET")
	}
	daemon.Override(&uc.Secret, *secret)
	if m.Getenv != nil && uc.Redis == "" {
		uc.Redis = m.Getenv("WILLOW_REDIS")
	}
	if err := daemon.RefusePlaceholder("upload secret", uc.Secret); err != nil {
		return err
	}
	daemon.Override(&uc.Staging, *staging)
	daemon.Override(&uc.PoolDir, *poolDir)
	daemon.Override(&uc.HTTP.Addr, *httpAddr)
	if *cors != "" {
		uc.HTTP.CORSOrigins = strings.Split(*cors, ",")
	}
	uc.RetireKeepPool1 = uc.RetireKeepPool1 || *keepPool1
	if *commitWait != 0 {
		uc.CommitWait = *commitWait
	}
	switch {
	case nc.Region == "":
		return errors.New("need -region (or node.region in the config)")
	case uc.Secret == "":
		return errors.New("need -secret (or upload.secret, or $WILLOW_UPLOAD_SECRET)")
	case uc.Staging == "":
		return errors.New("need -staging DIR (or upload.staging in the config)")
	}
	if nc.ID == "" {
		nc.ID = "upload-" + nc.Region + "-1"
	}
	st, err := daemon.OpenStore(sc.Dir, sc.S3)
	if err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	if nc.UploadSecret == "" {
		nc.UploadSecret = uc.Secret
	}
	ncfg, err := f.NodeConfig("upload", *nc, log)
	if err != nil {
		return err
	}
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	deps := upload.Deps{Node: n, Store: st}
	if nc.Master != "" {
		r, err := client.NewRouter(client.RouterConfig{TLS: ncfg.ClientTLS, Credentials: n.Credentials(), MasterAddr: nc.Master, Region: nc.Region})
		if err != nil {
			return err
		}
		defer r.Close()
		deps.Router = r
	}
	if uc.Redis != "" {
		rdb, err := redisconn.Open(uc.Redis)
		if err != nil {
			return err
		}
		defer rdb.Close()
		deps.Redis = rdb
	}
	if uc.PoolDir != "" {
		for i, dst := range []**buffer.Pool{&deps.Pool1, &deps.Pool2} {
			name := fmt.Sprint("pool", i+1)
			p, err := buffer.Open(filepath.Join(uc.PoolDir, name), buffer.Options{Name: name, Registerer: n.Registry(), Logger: log})
			if err != nil {
				return err
			}
			defer p.Close()
			*dst = p
		}
	}
	srv, err := upload.New(upload.Config{
		Secret: []byte(uc.Secret), StagingDir: uc.Staging, Limits: fc.Limits,
		CompressTimeout: uc.CompressTimeout, CommitWait: uc.CommitWait, StoreTimeout: uc.StoreTimeout,
		StagingTTL: uc.StagingTTL, StagingBudgetBytes: uc.StagingBudget, RetryMin: uc.RetryMin, RetryMax: uc.RetryMax, Logger: log,
		RetireTimeout: uc.RetireTimeout, RetireKeepPool1: uc.RetireKeepPool1,
		ChunkIdleTimeout: uc.ChunkIdleTimeout, MaxStreamsPerConn: uc.MaxStreamsPerConn, MaxStreamsPerUser: uc.MaxStreamsPerUser,
		MaxStagedPerConn: uc.MaxStagedPerConn, MaxStagedPerUser: uc.MaxStagedPerUser,
	}, deps)
	if err != nil {
		return err
	}
	hs, err := upload.NewHTTP(srv, uc.HTTP)
	if err != nil {
		return err
	}
	// SIGTERM retires the front (pools into the store, jobs handed over)
	// before it stops serving.
	rctx, stop := daemon.Retiring(ctx, log, func(ctx context.Context) error { _, err := srv.Retire(ctx); return err })
	defer stop()
	return daemon.Serve(rctx, n, func() {
		log.Info("upload front up", "grpc", n.Addr(), "http", hs.URL(), "admin", n.AdminAddr())
		if m.Ready != nil {
			m.Ready(n)
		}
	}, srv.Run, hs.Run)
}
