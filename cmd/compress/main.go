// Command compress runs one Willow compress worker (compress.Server on a
// node), registered with the master, taking codec knobs from it.
//
//	compress -config compress.yaml
//	compress -id compress-a-1 -region a -grpc :7100 -admin :7101 -master 127.0.0.1:7000 -store /var/lib/willow/store
//	compress -id compress-a-1 -region a -master M -s3-endpoint host:9000 -s3-bucket willow -s3-access-key K -s3-secret-key S
//
// The config file has two sections, node: (the runtime) and compress:
// (compress.Config plus the store); flags override it. It runs until
// SIGINT or SIGTERM.
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
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"willow/compress"
	"willow/node"
	"willow/store"
	"willow/store/fs"
	"willow/store/s3"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewMain().Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "compress:", err)
		os.Exit(1)
	}
}

// Main runs a compress worker; tests run it in process.
type Main struct {
	Stderr io.Writer
	// Ready, when set, is called with the listening node once it serves.
	Ready func(n *node.Node)
}

// NewMain returns a Main writing logs to stderr.
func NewMain() *Main { return &Main{Stderr: os.Stderr} }

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
	Compress struct {
		Workers       int           `yaml:"workers"`
		QueueLen      int           `yaml:"queue_len"`
		TaskTimeout   time.Duration `yaml:"task_timeout"`
		MaxPixels     int64         `yaml:"max_pixels"`
		MaxImageBytes int64         `yaml:"max_image_bytes"`
		MaxVideoBytes int64         `yaml:"max_video_bytes"`
		TempDir       string        `yaml:"temp_dir"`
		HEICPreset    string        `yaml:"heic_preset"`
		X264Preset    string        `yaml:"x264_preset"`
		FFmpeg        string        `yaml:"ffmpeg"`
		FFprobe       string        `yaml:"ffprobe"`
		RetryAfter    time.Duration `yaml:"retry_after"`
		StoreTimeout  time.Duration `yaml:"store_timeout"`
		Store         string        `yaml:"store"` // directory store
		S3            struct {
			Endpoint  string `yaml:"endpoint"`
			Bucket    string `yaml:"bucket"`
			AccessKey string `yaml:"access_key"`
			SecretKey string `yaml:"secret_key"`
			Region    string `yaml:"region"`
			Secure    bool   `yaml:"secure"`
		} `yaml:"s3"`
	} `yaml:"compress"`
}

// Run parses args, starts the worker and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("compress", flag.ContinueOnError)
	fset.SetOutput(m.Stderr)
	configF := fset.String("config", "", "YAML config file (sections node: and compress:)")
	id := fset.String("id", "", "node ID (default compress-REGION-1)")
	region := fset.String("region", "", "region (required, here or in the config)")
	grpcAddr := fset.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	admin := fset.String("admin", "", "admin HTTP listen address (default 127.0.0.1:0)")
	masterAddr := fset.String("master", "", "master gRPC address; empty runs without a master")
	storeDir := fset.String("store", "", "directory store root")
	s3Endpoint := fset.String("s3-endpoint", "", "S3 endpoint host:port (instead of -store)")
	s3Bucket := fset.String("s3-bucket", "", "S3 bucket")
	s3Access := fset.String("s3-access-key", "", "S3 access key")
	s3Secret := fset.String("s3-secret-key", "", "S3 secret key")
	workers := fset.Int("workers", 0, "concurrent tasks (default: cores)")
	queueLen := fset.Int("queue", 0, fmt.Sprintf("tasks waiting for a worker (default %d)", compress.DefaultQueueLen))
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
	nc, cc := &fc.Node, &fc.Compress
	set(&nc.ID, *id)
	set(&nc.Region, *region)
	set(&nc.GRPC, *grpcAddr)
	set(&nc.Admin, *admin)
	set(&nc.Master, *masterAddr)
	set(&cc.Store, *storeDir)
	set(&cc.S3.Endpoint, *s3Endpoint)
	set(&cc.S3.Bucket, *s3Bucket)
	set(&cc.S3.AccessKey, *s3Access)
	set(&cc.S3.SecretKey, *s3Secret)
	if *workers != 0 {
		cc.Workers = *workers
	}
	if *queueLen != 0 {
		cc.QueueLen = *queueLen
	}
	if nc.Region == "" {
		return errors.New("need -region (or node.region in the config)")
	}
	if nc.ID == "" {
		nc.ID = "compress-" + nc.Region + "-1"
	}

	var st store.Store
	switch {
	case cc.S3.Endpoint != "" && cc.Store != "":
		return errors.New("give -store or -s3-endpoint, not both")
	case cc.S3.Endpoint != "":
		s, err := s3.New(s3.Config{Endpoint: cc.S3.Endpoint, Bucket: cc.S3.Bucket, AccessKey: cc.S3.AccessKey,
			SecretKey: cc.S3.SecretKey, Region: cc.S3.Region, Secure: cc.S3.Secure})
		if err != nil {
			return err
		}
		st = s
	case cc.Store != "":
		s, err := fs.New(cc.Store)
		if err != nil {
			return err
		}
		st = s
	default:
		return errors.New("need -store DIR or -s3-endpoint (or compress.store / compress.s3 in the config)")
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	var srv *compress.Server
	srvTLS, cliTLS, err := node.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{TLS: srvTLS, ClientTLS: cliTLS, ID: nc.ID, Role: "compress", Region: nc.Region, Zone: nc.Zone, Group: nc.Group,
		GRPCAddr: nc.GRPC, AdminAddr: nc.Admin, MasterAddr: nc.Master, HeartbeatInterval: nc.HeartbeatInterval,
		ShutdownGrace: nc.ShutdownGrace, Capacity: nc.Capacity, Logger: log,
		QueueMs: func() float64 {
			if srv == nil {
				return 0
			}
			return srv.QueueMs()
		}})
	if err != nil {
		return err
	}
	srv, err = compress.New(compress.Config{
		Workers: cc.Workers, QueueLen: cc.QueueLen, TaskTimeout: cc.TaskTimeout, MaxPixels: cc.MaxPixels,
		MaxImageBytes: cc.MaxImageBytes, MaxVideoBytes: cc.MaxVideoBytes, TempDir: cc.TempDir,
		HEICPreset: cc.HEICPreset, X264Preset: cc.X264Preset, FFmpeg: cc.FFmpeg, FFprobe: cc.FFprobe,
		RetryAfter: cc.RetryAfter, StoreTimeout: cc.StoreTimeout, Logger: log,
	}, compress.Deps{Node: n, Store: st})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodeDone := make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go srv.Run(ctx)
	if m.Ready != nil {
		m.Ready(n)
	}
	select {
	case <-ctx.Done():
		return <-nodeDone
	case err := <-nodeDone:
		return err
	}
}
