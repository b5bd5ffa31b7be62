// Command edgecache runs one edge cache (OC) node: HTTP GET/HEAD
// /m/{id}/{variant} and gRPC EdgeCache.Get, filled from the object store or
// buffer pool 2, sharded among the OC's nodes by a consistent hash ring.
//
//	edgecache -config edge.yaml
//	edgecache -id edge-a-1 -region a -grpc :7300 -http :8080 -master 127.0.0.1:7000 -capacity 268435456 -store /var/lib/willow/store
//	edgecache -id edge-a-1 -region a -master M -s3-endpoint 127.0.0.1:9000 -s3-bucket willow -s3-access-key K -s3-secret-key S
//
// The config file has three sections, node: (the runtime), edgecache:
// (edgecache.Config) and store: (dir, or s3 endpoint/bucket/keys); flags
// override it. It runs until SIGTERM or interrupt.
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

	"willow/client"
	"willow/edgecache"
	"willow/node"
	"willow/shedding"
	"willow/store"
	fsstore "willow/store/fs"
	"willow/store/s3"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewMain().Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edgecache:", err)
		os.Exit(1)
	}
}

// Main runs an edge cache node; tests run it in process.
type Main struct {
	Stderr io.Writer
	// Ready, when set, is called with the node and the server once both
	// listen.
	Ready func(n *node.Node, s *edgecache.Server)
}

// NewMain returns a Main on the process's stderr.
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
	} `yaml:"node"`
	EdgeCache struct {
		CapacityBytes     int64         `yaml:"capacity_bytes"`
		DiskDir           string        `yaml:"disk_dir"`
		DiskCapacityBytes int64         `yaml:"disk_capacity_bytes"`
		HTTP              string        `yaml:"http"`
		VirtualNodes      int           `yaml:"virtual_nodes"`
		URLSecret         string        `yaml:"url_secret"`
		OriginTimeout     time.Duration `yaml:"origin_timeout"`
		PeerTimeout       time.Duration `yaml:"peer_timeout"`
		RefreshInterval   time.Duration `yaml:"refresh_interval"`
		MaxObjectBytes    int64         `yaml:"max_object_bytes"`
	} `yaml:"edgecache"`
	Store struct {
		Dir string `yaml:"dir"`
		S3  struct {
			Endpoint  string `yaml:"endpoint"`
			Bucket    string `yaml:"bucket"`
			AccessKey string `yaml:"access_key"`
			SecretKey string `yaml:"secret_key"`
			Region    string `yaml:"region"`
			Secure    bool   `yaml:"secure"`
		} `yaml:"s3"`
	} `yaml:"store"`
}

// Run parses args, starts the node and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("edgecache", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	configF := fs.String("config", "", "YAML config file (sections node:, edgecache:, store:)")
	id := fs.String("id", "", "node ID (default edge-REGION-1)")
	region := fs.String("region", "", "region (default a)")
	grpcAddr := fs.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	httpAddr := fs.String("http", "", "HTTP listen address (default 127.0.0.1:0)")
	admin := fs.String("admin", "", "admin HTTP listen address (default 127.0.0.1:0)")
	masterAddr := fs.String("master", "", "master gRPC address(es), comma-separated; empty: standalone")
	capacity := fs.Int64("capacity", 0, "memory cache capacity in bytes (default 256 MiB)")
	storeDir := fs.String("store", "", "directory store root")
	s3Endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (instead of -store)")
	s3Bucket := fs.String("s3-bucket", "", "S3 bucket")
	s3Access := fs.String("s3-access-key", "", "S3 access key")
	s3Secret := fs.String("s3-secret-key", "", "S3 secret key")
	tlsCert := fs.String("tls-cert", "", "PEM certificate: serve gRPC over TLS (with -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of -tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle: verify servers with it and require client certificates (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
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
	override := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	override(&fc.Node.ID, *id)
	override(&fc.Node.Region, *region)
	override(&fc.Node.GRPC, *grpcAddr)
	override(&fc.Node.Admin, *admin)
	override(&fc.Node.Master, *masterAddr)
	override(&fc.EdgeCache.HTTP, *httpAddr)
	override(&fc.Store.Dir, *storeDir)
	override(&fc.Store.S3.Endpoint, *s3Endpoint)
	override(&fc.Store.S3.Bucket, *s3Bucket)
	override(&fc.Store.S3.AccessKey, *s3Access)
	override(&fc.Store.S3.SecretKey, *s3Secret)
	if *capacity != 0 {
		fc.EdgeCache.CapacityBytes = *capacity
	}
	if fc.Node.Region == "" {
		fc.Node.Region = "a"
	}
	if fc.Node.ID == "" {
		fc.Node.ID = "edge-" + fc.Node.Region + "-1"
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	st, err := openStore(fc)
	if err != nil {
		return err
	}
	sc := shedding.ServiceConfig()
	srvTLS, cliTLS, err := node.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{TLS: srvTLS, ClientTLS: cliTLS, ID: fc.Node.ID, Role: "edgecache", Region: fc.Node.Region, Zone: fc.Node.Zone,
		Group: fc.Node.Group, GRPCAddr: fc.Node.GRPC, AdminAddr: fc.Node.Admin, MasterAddr: fc.Node.Master,
		HeartbeatInterval: fc.Node.HeartbeatInterval, ShutdownGrace: fc.Node.ShutdownGrace, Logger: log, Shed: &sc})
	if err != nil {
		return err
	}
	deps := edgecache.Deps{Node: n, Store: st}
	if fc.Node.Master != "" {
		r, err := client.NewRouter(client.RouterConfig{TLS: cliTLS, MasterAddr: fc.Node.Master, Region: fc.Node.Region})
		if err != nil {
			return err
		}
		defer r.Close()
		deps.Router = r
	}
	ec := fc.EdgeCache
	s, err := edgecache.New(edgecache.Config{
		CapacityBytes: ec.CapacityBytes, DiskDir: ec.DiskDir, DiskCapacityBytes: ec.DiskCapacityBytes,
		HTTPAddr: ec.HTTP, VirtualNodes: ec.VirtualNodes, URLSecret: []byte(ec.URLSecret),
		OriginTimeout: ec.OriginTimeout, PeerTimeout: ec.PeerTimeout, RefreshInterval: ec.RefreshInterval,
		MaxObjectBytes: ec.MaxObjectBytes,
	}, deps)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodeDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { nodeDone <- n.Run(ctx) }()
	go func() { srvDone <- s.Run(ctx) }()
	log.Info("edge cache up", "grpc", n.Addr(), "http", s.HTTPAddr(), "admin", n.AdminAddr())
	if m.Ready != nil {
		m.Ready(n, s)
	}
	// Either one ending (an error, or ctx done) stops the other.
	var srvErr, nodeErr error
	select {
	case srvErr = <-srvDone:
		cancel()
		nodeErr = <-nodeDone
	case nodeErr = <-nodeDone:
		cancel()
		srvErr = <-srvDone
	}
	return errors.Join(srvErr, nodeErr)
}

// openStore opens the S3 store when an endpoint is given, else the
// directory store.
func openStore(fc FileConfig) (store.Store, error) {
	c := fc.Store.S3
	switch {
	case c.Endpoint != "":
		return s3.New(s3.Config{Endpoint: c.Endpoint, Bucket: c.Bucket, AccessKey: c.AccessKey, SecretKey: c.SecretKey,
			Region: c.Region, Secure: c.Secure})
	case fc.Store.Dir != "":
		return fsstore.New(fc.Store.Dir)
	}
	return nil, errors.New("need -store DIR or -s3-endpoint (or store.dir / store.s3 in the config)")
}
