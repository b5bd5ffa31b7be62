package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/buffer"
	"willow/client"
	"willow/compress"
	"willow/edgecache"
	"willow/flex"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/shedding"
	"willow/store"
	"willow/store/fs"
	"willow/timeline"
	"willow/upload"
	"willow/urlsign"
)

// Config configures a one-box cluster. Zero values mean the default.
type Config struct {
	// Dir holds everything: the directory store, buffer pools, staging,
	// Redis data, cluster.json. Required.
	Dir string
	// RedisURL, when set, uses that Redis instead of starting redis-server.
	RedisURL string
	// Regions; default a and b.
	Regions []string
	// OncallToken (the developer's operator token, role admin),
	// UploadSecret and ClusterSecret; default: kept from an existing
	// DIR/cluster.json, else random.
	OncallToken   string
	UploadSecret  string
	ClusterSecret string
	// URLKeys sign and verify download URLs; default: kept from an
	// existing DIR/cluster.json, else one random key.
	URLKeys []urlsign.Key
	// Operators are more operator identities besides the developer's
	// (tests add read-only ones).
	Operators *auth.Operators
	// Store, when set, replaces the directory store (tests use S3).
	Store store.Store
	// StagingTTL is the upload fronts' staging TTL (tests of expiry);
	// default upload.DefaultStagingTTL.
	StagingTTL time.Duration
	// CORSOrigins may upload over HTTP from a browser; default the
	// console's origin.
	CORSOrigins []string
	// HeartbeatInterval for every node; default node.DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Cluster is a running one-box cluster.
type Cluster struct {
	File   File
	Master *master.Server
	Redis  redis.UniversalClient

	cfg     Config
	redisP  *RedisProc
	runCtx  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errMu   sync.Mutex    // guards err
	err     error         // the first error a component stopped with
	failed  chan struct{} // closed when err is set
	closers []func()
	nodes   []*node.Node
	auth    *auth.Config // every node's credentials
}

// Start starts the cluster and returns once every node serves and has
// registered with the master. Stop it with Close.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("cluster: Dir is required")
	}
	if len(cfg.Regions) == 0 {
		cfg.Regions = []string{"a", "b"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if old, err := LoadFile(filepath.Join(cfg.Dir, "cluster.json")); err == nil {
		if cfg.OncallToken == "" {
			cfg.OncallToken = old.OncallToken
		}
		if cfg.UploadSecret == "" {
			cfg.UploadSecret = old.UploadSecret
		}
		if len(cfg.URLKeys) == 0 {
			cfg.URLKeys = old.URLKeys
		}
		if cfg.ClusterSecret == "" {
			cfg.ClusterSecret = old.ClusterSecret
		}
	}
	if cfg.OncallToken == "" {
		cfg.OncallToken = randomHex(16)
	}
	if cfg.UploadSecret == "" {
		cfg.UploadSecret = randomHex(32)
	}
	if len(cfg.URLKeys) == 0 {
		cfg.URLKeys = []urlsign.Key{urlsign.GenerateKey("dev-" + randomHex(3))}
	}
	if cfg.ClusterSecret == "" {
		cfg.ClusterSecret = randomHex(32)
	}
	ops, err := cfg.Operators.With(DeveloperOperator, cfg.OncallToken, auth.RoleAdmin)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	opsFile := filepath.Join(cfg.Dir, "operators.yaml")
	if err := WriteOperators(opsFile, cfg.OncallToken); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c = &Cluster{cfg: cfg, runCtx: runCtx, cancel: cancel, failed: make(chan struct{}),
		auth: &auth.Config{ClusterSecret: cfg.ClusterSecret, UploadSecret: []byte(cfg.UploadSecret), Operators: ops}}
	// Close what started on failure: through its own variable, since
	// every error return sets the result c to nil.
	started := c
	defer func() {
		if err != nil {
			started.Close()
		}
	}()

	// Redis.
	redisURL := cfg.RedisURL
	if redisURL == "" {
		c.redisP, err = StartRedis(ctx, filepath.Join(cfg.Dir, "redis"))
		if err != nil {
			return nil, err
		}
		redisURL = c.redisP.URL
	}
	rdb, err := redisconn.Open(redisURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.Redis = rdb
	c.closers = append(c.closers, func() { rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("cluster: redis %s: %w", redisconn.Redact(redisURL), err)
	}

	// Store.
	st := cfg.Store
	if st == nil {
		if st, err = fs.New(filepath.Join(cfg.Dir, "store")); err != nil {
			return nil, err
		}
	}

	// Master.
	mn, err := c.newNode("master-1", "master", "", "", nodeLoad{})
	if err != nil {
		return nil, err
	}
	ms, err := master.New(master.Config{}, master.Deps{Node: mn, Redis: rdb})
	if err != nil {
		return nil, err
	}
	c.Master = ms
	c.run(mn.Run)
	c.run(ms.Run)
	consoleL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	console := &http.Server{Handler: ms.ConsoleHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = console.Serve(consoleL) }()
	c.closers = append(c.closers, func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = console.Shutdown(sctx)
	})
	masterAddr := mn.Addr()
	c.File = File{
		Master: masterAddr, Console: "http://" + consoleL.Addr().String() + "/console",
		Redis: redisURL, OncallToken: cfg.OncallToken, UploadSecret: cfg.UploadSecret,
		ClusterSecret: cfg.ClusterSecret, Operators: opsFile,
		URLKeys: cfg.URLKeys, Regions: map[string]Region{},
	}

	// Regions.
	for _, region := range cfg.Regions {
		var reg Region

		var cs *compress.Server
		cn, err := c.newNode("compress-"+region+"-1", "compress", region, masterAddr, nodeLoad{queueMs: func() float64 {
			if cs == nil {
				return 0
			}
			return cs.QueueMs()
		}})
		if err != nil {
			return nil, err
		}
		cs, err = compress.New(compress.Config{TempDir: filepath.Join(cfg.Dir, "tmp")}, compress.Deps{Node: cn, Store: st})
		if err != nil {
			return nil, err
		}
		c.run(cn.Run)
		c.run(cs.Run)
		reg.Compress = cn.Addr()

		un, err := c.newNode("upload-"+region+"-1", "upload", region, masterAddr, nodeLoad{})
		if err != nil {
			return nil, err
		}
		pools := filepath.Join(cfg.Dir, "pools", un.Config().ID)
		p1, err := buffer.Open(filepath.Join(pools, "pool1"), buffer.Options{Name: "pool1", Registerer: un.Registry()})
		if err != nil {
			return nil, err
		}
		p2, err := buffer.Open(filepath.Join(pools, "pool2"), buffer.Options{Name: "pool2", Registerer: un.Registry()})
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, func() { p1.Close(); p2.Close() })
		router, err := c.router(un, masterAddr)
		if err != nil {
			return nil, err
		}
		us, err := upload.New(upload.Config{
			Secret:     []byte(cfg.UploadSecret),
			StagingDir: filepath.Join(cfg.Dir, "staging", un.Config().ID),
			StagingTTL: cfg.StagingTTL,
		}, upload.Deps{Node: un, Store: st, Redis: rdb, Router: router, Pool1: p1, Pool2: p2})
		if err != nil {
			return nil, err
		}
		origins := cfg.CORSOrigins
		if origins == nil {
			origins = []string{"http://" + consoleL.Addr().String()}
		}
		uh, err := upload.NewHTTP(us, upload.HTTPConfig{CORSOrigins: origins})
		if err != nil {
			return nil, err
		}
		c.run(un.Run)
		c.run(us.Run)
		c.run(uh.Run)
		reg.Upload = un.Addr()
		reg.UploadHTTP = uh.URL()

		en, err := c.newNode("edgecache-"+region+"-1", "edgecache", region, masterAddr, nodeLoad{})
		if err != nil {
			return nil, err
		}
		erouter, err := c.router(en, masterAddr)
		if err != nil {
			return nil, err
		}
		es, err := edgecache.New(edgecache.Config{URLKeys: cfg.URLKeys, PublicBusinesses: flex.PublicBusinesses(),
			DiskDir: filepath.Join(cfg.Dir, "edgecache", en.Config().ID)}, edgecache.Deps{Node: en, Store: st, Router: erouter})
		if err != nil {
			return nil, err
		}
		c.run(en.Run)
		c.run(es.Run)
		reg.EdgecacheGRPC = en.Addr()
		reg.EdgecacheHTTP = es.HTTPAddr()
		c.File.Regions[region] = reg
	}

	// Timeline.
	var ts *timeline.Server
	tn, err := c.newNode("timeline-"+cfg.Regions[0]+"-1", "timeline", cfg.Regions[0], masterAddr, nodeLoad{gauges: func() map[string]float64 {
		if ts == nil {
			return nil
		}
		return ts.Gauges()
	}})
	if err != nil {
		return nil, err
	}
	tr, err := client.NewRouter(client.RouterConfig{MasterAddr: masterAddr, Region: cfg.Regions[0], Credentials: tn.Credentials()})
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { tr.Close() })
	ts, err = timeline.New(timeline.Config{URLKeys: cfg.URLKeys},
		timeline.Deps{Node: tn, Redis: rdb, Media: timeline.UploadMedia{Router: tr}})
	if err != nil {
		return nil, err
	}
	c.run(tn.Run)
	c.run(ts.Run)
	c.File.Timeline = tn.Addr()

	for _, n := range c.nodes {
		nc := n.Config()
		c.File.Nodes = append(c.File.Nodes, FileNode{ID: nc.ID, Role: nc.Role, Region: nc.Region,
			Addr: n.AdvertisedAddr(), Admin: n.AdvertisedAdminAddr(), PID: os.Getpid()})
	}
	if err := c.File.Save(filepath.Join(cfg.Dir, "cluster.json")); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, masterAddr); err != nil {
		return nil, err
	}
	return c, nil
}

// newNode builds a node with the shared shedding interceptors installed.
// nodeLoad are the role-specific load figures a node reports.
type nodeLoad struct {
	gauges  func() map[string]float64
	queueMs func() float64
}

func (c *Cluster) newNode(id, role, region, masterAddr string, load nodeLoad) (*node.Node, error) {
	cfg := node.Config{
		ID: id, Role: role, Region: region, MasterAddr: masterAddr,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		Logger:            c.cfg.Logger,
		Gauges:            load.gauges,
		QueueMs:           load.queueMs,
		Auth:              c.auth,
		// Every node of the one-box cluster shares this process: RSS and
		// disk figures are the process's, and heartbeats say so.
		SharedProcess: true,
	}
	if role != "master" {
		cfg.Shed = &shedding.Config{} // each service declares its methods' classes
	} else {
		cfg.StreamWorkers = node.MasterStreamWorkers // as the mains give it
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// router returns a router for n's calls, with n's credentials.
func (c *Cluster) router(n *node.Node, masterAddr string) (*client.Router, error) {
	r, err := client.NewRouter(client.RouterConfig{MasterAddr: masterAddr, Region: n.Config().Region, Credentials: n.Credentials()})
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { r.Close() })
	return r, nil
}

// run starts f in the background until Close.
func (c *Cluster) run(f func(context.Context) error) {
	ctx := c.runCtx
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := f(ctx); err != nil {
			c.errMu.Lock()
			if c.err == nil {
				c.err = err
				close(c.failed)
			}
			c.errMu.Unlock()
		}
	}()
}

// waitReady waits until the master lists every node as healthy.
func (c *Cluster) waitReady(ctx context.Context, masterAddr string) error {
	conn, err := node.Dial(masterAddr, nil, grpc.WithPerRPCCredentials(auth.Bearer(c.cfg.OncallToken)))
	if err != nil {
		return err
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	want := len(c.nodes) - 1 // all but the master
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := mc.ListNodes(cctx, &willowv1.ListNodesRequest{})
		cancel()
		if err == nil {
			healthy := 0
			for _, ns := range resp.GetNodes() {
				if ns.GetState() == "healthy" {
					healthy++
				}
			}
			if healthy >= want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: nodes not all healthy after 30s (last: %v)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Node returns the cluster's node with that ID (e.g. "upload-a-1"), or
// nil; tests read its metrics registry.
func (c *Cluster) Node(id string) *node.Node {
	for _, n := range c.nodes {
		if n.Config().ID == id {
			return n
		}
	}
	return nil
}

// Failed is closed when a component stops with an error; Err says which.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Err returns the first error a component stopped with, if any.
func (c *Cluster) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close stops every node (gracefully), the Redis child and closes files.
func (c *Cluster) Close() {
	c.cancel()
	c.wg.Wait()
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
	if c.redisP != nil {
		c.redisP.Stop()
		c.redisP = nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Nodes returns every node of the cluster, the master first.
func (c *Cluster) Nodes() []*node.Node { return append([]*node.Node(nil), c.nodes...) }
