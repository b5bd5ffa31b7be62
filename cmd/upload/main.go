// Command upload runs one Willow upload front (upload.Server on a node),
// registered with the master, with its staging dir, buffer pools, object
// store and (optionally) Redis for the compress journal.
//
//	upload -config upload.yaml
//	upload -id upload-a-1 -region a -grpc :7200 -admin :7201 -master 127.0.0.1:7000 \
//	       -secret S -staging /var/lib/willow/staging -pool-dir /var/lib/willow/pools -store /var/lib/willow/store
//	upload ... -s3-endpoint host:9000 -s3-bucket willow -s3-access-key K -s3-secret-key S -redis redis://127.0.0.1:6379
//
// The config file has three sections, node: (the runtime), upload:
// (upload.Config) and store: (directory or S3); flags override it. The
// secret may also come from $WILLOW_UPLOAD_SECRET. It runs until SIGINT or
// SIGTERM.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"willow/buffer"
	"willow/client"
	"willow/node"
	"willow/shedding"
	"willow/store"
	"willow/store/fs"
	"willow/store/s3"
	"willow/upload"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewMain().Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "upload:", err)
		os.Exit(1)
	}
}

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
	Node struct {
		ID                string        `yaml:"id"`
		Region            string        `yaml:"region"`
		Zone              string        `yaml:"zone"`
		Group             string        `yaml:"group"`
		GRPC              string        `yaml:"grpc"`
		Admin             string        `yaml:"admin"`
		Master            string        `yaml:"master"`
		HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
		ShutdownGrace     time.Duration `yaml:"shutdown_grace"`
		Capacity          int32         `yaml:"capacity"`
	} `yaml:"node"`
	Upload struct {
		Secret          string        `yaml:"secret"`
		Staging         string        `yaml:"staging"`
		PoolDir         string        `yaml:"pool_dir"` // pool1/ and pool2/ under it; empty disables the pools
		Redis           string        `yaml:"redis"`
		MaxImageBytes   int64         `yaml:"max_image_bytes"`
		MaxVideoBytes   int64         `yaml:"max_video_bytes"`
		MaxPixels       int64         `yaml:"max_pixels"`
		Businesses      []string      `yaml:"businesses"`
		CompressTimeout time.Duration `yaml:"compress_timeout"`
		CommitWait      time.Duration `yaml:"commit_wait"`
		StoreTimeout    time.Duration `yaml:"store_timeout"`
		StagingTTL      time.Duration `yaml:"staging_ttl"`
		RetryMin        time.Duration `yaml:"retry_min"`
		RetryMax        time.Duration `yaml:"retry_max"`
	} `yaml:"upload"`
	Store struct {
		Dir string `yaml:"dir"`
		S3  struct {
			Endpoint  string `yaml:"endpoint"`
			Bucket    string `yaml:"bucket"`
			AccessKey string `yaml:"access_key"`
			SecretKey string `yaml:"secret_key"`
			Region    string `yaml:"region"`
			Secure    bool   `yaml:"secure"`
			PartSize  int64  `yaml:"part_size"`
		} `yaml:"s3"`
	} `yaml:"store"`
}

// Run parses args, starts the front and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("upload", flag.ContinueOnError)
	fset.SetOutput(m.Stderr)
	configF := fset.String("config", "", "YAML config file (sections node:, upload: and store:)")
	id := fset.String("id", "", "node ID (default upload-REGION-1)")
	region := fset.String("region", "", "region (required, here or in the config)")
	grpcAddr := fset.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	admin := fset.String("admin", "", "admin HTTP listen address (default 127.0.0.1:0)")
	masterAddr := fset.String("master", "", "master gRPC address; empty runs without a master (and without compress routing)")
	redisURL := fset.String("redis", "", "Redis URL for the compress journal (default: journal in the staging dir)")
	secret := fset.String("secret", "", "upload-token HMAC secret (default $WILLOW_UPLOAD_SECRET)")
	staging := fset.String("staging", "", "staging directory (required)")
	poolDir := fset.String("pool-dir", "", "buffer pool directory (pool1/, pool2/); empty disables the pools")
	storeDir := fset.String("store", "", "directory store root")
	s3Endpoint := fset.String("s3-endpoint", "", "S3 endpoint host:port (instead of -store)")
	s3Bucket := fset.String("s3-bucket", "", "S3 bucket")
	s3Access := fset.String("s3-access-key", "", "S3 access key")
	s3Secret := fset.String("s3-secret-key", "", "S3 secret key")
	commitWait := fset.Duration("commit-wait", 0, "how long Commit waits for the first compress attempt to list variants (default: the compress timeout; negative: do not wait)")
	tlsCert := fset.String("tls-cert", "", "PEM certificate: serve gRPC over TLS (with -tls-key)")
	tlsKey := fset.String("tls-key", "", "PEM private key of -tls-cert")
	tlsCA := fset.String("tls-ca", "", "PEM CA bundle: verify servers with it and require client certificates (mutual TLS)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fset.Arg(0))
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
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	nc, uc, sc := &fc.Node, &fc.Upload, &fc.Store
	set(&nc.ID, *id)
	set(&nc.Region, *region)
	set(&nc.GRPC, *grpcAddr)
	set(&nc.Admin, *admin)
	set(&nc.Master, *masterAddr)
	set(&uc.Redis, *redisURL)
	if m.Getenv != nil {
		set(&uc.Secret, m.Getenv("WILLOW_UPLOAD_SECRET"))
	}
	set(&uc.Secret, *secret)
	set(&uc.Staging, *staging)
	set(&uc.PoolDir, *poolDir)
	set(&sc.Dir, *storeDir)
	if *commitWait != 0 {
		uc.CommitWait = *commitWait
	}
	set(&sc.S3.Endpoint, *s3Endpoint)
	set(&sc.S3.Bucket, *s3Bucket)
	set(&sc.S3.AccessKey, *s3Access)
	set(&sc.S3.SecretKey, *s3Secret)
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

	var st store.Store
	switch {
	case sc.S3.Endpoint != "" && sc.Dir != "":
		return errors.New("give -store or -s3-endpoint, not both")
	case sc.S3.Endpoint != "":
		s, err := s3.New(s3.Config{Endpoint: sc.S3.Endpoint, Bucket: sc.S3.Bucket, AccessKey: sc.S3.AccessKey,
			SecretKey: sc.S3.SecretKey, Region: sc.S3.Region, Secure: sc.S3.Secure, PartSize: sc.S3.PartSize})
		if err != nil {
			return err
		}
		st = s
	case sc.Dir != "":
		s, err := fs.New(sc.Dir)
		if err != nil {
			return err
		}
		st = s
	default:
		return errors.New("need -store DIR or -s3-endpoint (or store.dir / store.s3 in the config)")
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	shed := shedding.ServiceConfig()
	srvTLS, cliTLS, err := node.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{TLS: srvTLS, ClientTLS: cliTLS, ID: nc.ID, Role: "upload", Region: nc.Region, Zone: nc.Zone, Group: nc.Group,
		GRPCAddr: nc.GRPC, AdminAddr: nc.Admin, MasterAddr: nc.Master, HeartbeatInterval: nc.HeartbeatInterval,
		ShutdownGrace: nc.ShutdownGrace, Capacity: nc.Capacity, Logger: log, Shed: &shed})
	if err != nil {
		return err
	}
	deps := upload.Deps{Node: n, Store: st}
	if nc.Master != "" {
		r, err := client.NewRouter(client.RouterConfig{TLS: cliTLS, MasterAddr: nc.Master, Region: nc.Region})
		if err != nil {
			return err
		}
		defer r.Close()
		deps.Router = r
	}
	if uc.Redis != "" {
		opt, err := redis.ParseURL(uc.Redis)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		rdb := redis.NewClient(opt)
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
		Secret: []byte(uc.Secret), StagingDir: uc.Staging, MaxImageBytes: uc.MaxImageBytes, MaxVideoBytes: uc.MaxVideoBytes,
		MaxPixels: uc.MaxPixels, Businesses: uc.Businesses, CompressTimeout: uc.CompressTimeout, CommitWait: uc.CommitWait, StoreTimeout: uc.StoreTimeout,
		StagingTTL: uc.StagingTTL, RetryMin: uc.RetryMin, RetryMax: uc.RetryMax, Logger: log,
	}, deps)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodeDone := make(chan error, 1)
	runDone := make(chan struct{})
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { _ = srv.Run(ctx); close(runDone) }()
	if m.Ready != nil {
		m.Ready(n)
	}
	var rerr error
	select {
	case <-ctx.Done():
		rerr = <-nodeDone
	case rerr = <-nodeDone:
		cancel()
	}
	<-runDone
	return rerr
}
