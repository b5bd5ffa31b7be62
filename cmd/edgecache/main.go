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
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"willow/client"
	"willow/cmd/internal/daemon"
	"willow/edgecache"
	"willow/flex"
	"willow/node"
	"willow/urlsign"
)

func main() { daemon.Main("edgecache", NewMain().Run) }

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
	Node      daemon.NodeConfig `yaml:"node"`
	EdgeCache struct {
		CapacityBytes     int64         `yaml:"capacity_bytes"`
		DiskDir           string        `yaml:"disk_dir"`
		DiskCapacityBytes int64         `yaml:"disk_capacity_bytes"`
		HTTP              string        `yaml:"http"`
		VirtualNodes      int           `yaml:"virtual_nodes"`
		URLKeys           []urlsign.Key `yaml:"url_keys"`
		PublicBusinesses  []string      `yaml:"public_businesses"`
		OriginTimeout     time.Duration `yaml:"origin_timeout"`
		PeerTimeout       time.Duration `yaml:"peer_timeout"`
		RefreshInterval   time.Duration `yaml:"refresh_interval"`
		MaxObjectBytes    int64         `yaml:"max_object_bytes"`
		SliceBytes        int64         `yaml:"slice_bytes"`
		FillBudgetBytes   int64         `yaml:"fill_budget_bytes"`
		FallbackQuality   int           `yaml:"fallback_jpeg_quality"`
		Transcoders       int           `yaml:"transcoders"`
	} `yaml:"edgecache"`
	Store struct {
		Dir string          `yaml:"dir"`
		S3  daemon.S3Config `yaml:"s3"`
	} `yaml:"store"`
}

// Run parses args, starts the node and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	f := daemon.NewFlags("edgecache", m.Stderr, true)
	httpAddr := f.FS.String("http", "", "HTTP listen address for GET/HEAD /m/{id}/{variant} (default 127.0.0.1:0)")
	capacity := f.FS.Int64("capacity", 0, "memory cache capacity in bytes (default 256 MiB)")
	diskDir := f.FS.String("disk-dir", "", "disk tier directory, kept across restarts (default: no disk tier)")
	var fc FileConfig
	if err := f.Parse(args, &fc, &fc.Node, &fc.Store.Dir, &fc.Store.S3); err != nil {
		return err
	}
	daemon.Override(&fc.EdgeCache.HTTP, *httpAddr)
	daemon.Override(&fc.EdgeCache.DiskDir, *diskDir)
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
	st, err := daemon.OpenStore(fc.Store.Dir, fc.Store.S3)
	if err != nil {
		return err
	}
	ncfg, err := f.NodeConfig("edgecache", fc.Node, log)
	if err != nil {
		return err
	}
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	deps := edgecache.Deps{Node: n, Store: st}
	if fc.Node.Master != "" {
		r, err := client.NewRouter(client.RouterConfig{TLS: ncfg.ClientTLS, Credentials: n.Credentials(), MasterAddr: fc.Node.Master, Region: fc.Node.Region})
		if err != nil {
			return err
		}
		defer r.Close()
		deps.Router = r
	}
	ec := fc.EdgeCache
	if ec.PublicBusinesses == nil {
		ec.PublicBusinesses = flex.PublicBusinesses()
	}
	if len(ec.URLKeys) == 0 {
		log.Warn("no url_keys: downloads are not signed, every media item is served to anyone (development only)")
	}
	s, err := edgecache.New(edgecache.Config{
		CapacityBytes: ec.CapacityBytes, DiskDir: ec.DiskDir, DiskCapacityBytes: ec.DiskCapacityBytes,
		HTTPAddr: ec.HTTP, VirtualNodes: ec.VirtualNodes, URLKeys: ec.URLKeys, PublicBusinesses: ec.PublicBusinesses,
		OriginTimeout: ec.OriginTimeout, PeerTimeout: ec.PeerTimeout, RefreshInterval: ec.RefreshInterval,
		MaxObjectBytes: ec.MaxObjectBytes, SliceBytes: ec.SliceBytes, FillBudgetBytes: ec.FillBudgetBytes,
		FallbackJPEGQuality: ec.FallbackQuality, Transcoders: ec.Transcoders,
	}, deps)
	if err != nil {
		return err
	}
	return daemon.Serve(ctx, n, func() {
		log.Info("edge cache up", "grpc", n.Addr(), "http", s.HTTPAddr(), "admin", n.AdminAddr())
		if m.Ready != nil {
			m.Ready(n, s)
		}
	}, s.Run)
}
