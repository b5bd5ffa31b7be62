package edgecache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"

	"willow/edgecache/ring"
	"willow/limits"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
	"willow/urlsign"
)

// Defaults.
const (
	DefaultCapacityBytes     = 256 << 20
	DefaultDiskCapacityBytes = 1 << 30
	DefaultHTTPAddr          = "127.0.0.1:0"
	DefaultVirtualNodes      = ring.DefaultVirtualNodes
	DefaultOriginTimeout     = 10 * time.Second
	DefaultPeerTimeout       = 5 * time.Second
	DefaultRefreshInterval   = 2 * time.Second
	DefaultPeerBackoff       = 5 * time.Second
	DefaultRetryAfter        = time.Second
	DefaultChunkBytes        = 64 << 10
	DefaultMaxObjectBytes    = 512 << 20
	DefaultSliceBytes        = 1 << 20
	MinSliceBytes            = 64 << 10
	DefaultFillBudgetBytes   = 64 << 20
	DefaultFallbackQuality   = 85 // JPEG q85 matches the SSIM of HEIC at the normal quality (BENCHMARKS.md)
	DefaultTranscoders       = 2
	DefaultSendfileMinBytes  = 64 << 10 // BENCHMARKS.md, Edge cache 2: where sendfile starts to pay
)

// HTTP connection timeouts, on both HTTP paths.
const (
	httpHeaderTimeout = 10 * time.Second // a request head, from its first byte
	httpIdleTimeout   = 2 * time.Minute  // between requests
)

// Config configures an edge cache node. Zero values mean the default. The
// yaml tags are the keys of the edgecache: section of cmd/edgecache's
// config file; the fields tagged "-" are set by code.
type Config struct {
	// CapacityBytes bounds the memory cache; default DefaultCapacityBytes.
	CapacityBytes int64 `yaml:"capacity_bytes"`
	// DiskDir, when set, enables the disk tier in DiskDir/objects. Its
	// contents survive a restart: the index is rebuilt from the files at
	// start, torn or corrupt entries dropped (see diskTier).
	DiskDir string `yaml:"disk_dir"`
	// DiskCapacityBytes bounds the disk tier; default
	// DefaultDiskCapacityBytes.
	DiskCapacityBytes int64 `yaml:"disk_capacity_bytes"`
	// HTTPAddr is the listen address for plain HTTP; default
	// DefaultHTTPAddr.
	HTTPAddr string `yaml:"http"`
	// VirtualNodes is the number of ring points per node; default
	// DefaultVirtualNodes.
	VirtualNodes int `yaml:"virtual_nodes"`
	// Hash places keys and nodes on the ring; default ring.DefaultHash.
	// Every node of an OC must use the same.
	Hash ring.Hash `yaml:"-"`
	// URLKeys, when set, make every download (HTTP and gRPC) need a URL
	// signed with one of them (package urlsign; the first is the one
	// signers use, all verify), except media of a PublicBusinesses
	// business. Unset: downloads are not signed (development only).
	URLKeys []urlsign.Key `yaml:"url_keys"`
	// PublicBusinesses are the businesses whose downloads need no
	// signature (e.g. avatar); every other business is signed.
	PublicBusinesses []string `yaml:"public_businesses"`
	// OriginTimeout bounds one origin read; default DefaultOriginTimeout.
	OriginTimeout time.Duration `yaml:"origin_timeout"`
	// PeerTimeout bounds one fetch from the owner peer; default
	// DefaultPeerTimeout.
	PeerTimeout time.Duration `yaml:"peer_timeout"`
	// PeerBackoff is how long a peer that failed a fetch is skipped (its
	// objects read from origin directly); default DefaultPeerBackoff.
	PeerBackoff time.Duration `yaml:"peer_backoff"`
	// RefreshInterval is how often ring membership is refreshed from
	// Peers or the Router; default DefaultRefreshInterval.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// Peers, when set, lists the OC's members (this node included or
	// not: it is always a member). It takes precedence over the Router.
	Peers func(ctx context.Context) ([]Peer, error) `yaml:"-"`
	// MaxObjectBytes bounds one object read whole from origin or a peer
	// (any object of a store without ranged reads, a JPEG fallback);
	// default DefaultMaxObjectBytes. Sliced objects have no bound.
	MaxObjectBytes int64 `yaml:"max_object_bytes"`
	// SliceBytes is the slice size: an object larger than one slice is
	// filled and cached in slices (see slice.go); default
	// DefaultSliceBytes, at least MinSliceBytes.
	SliceBytes int64 `yaml:"slice_bytes"`
	// FillBudgetBytes bounds the bytes all concurrent fills of this node
	// hold in memory; a fill over it waits; default DefaultFillBudgetBytes,
	// at least SliceBytes.
	FillBudgetBytes int64 `yaml:"fill_budget_bytes"`
	// FallbackJPEGQuality is the quality of the JPEG made from a HEIC
	// variant for clients that do not accept HEIC; default
	// DefaultFallbackQuality.
	FallbackJPEGQuality int `yaml:"fallback_jpeg_quality"`
	// MaxTranscodePixels bounds the HEIC the edge decodes for the JPEG
	// fallback; default limits.DefaultMaxPixels.
	MaxTranscodePixels int64 `yaml:"max_transcode_pixels"`
	// Transcoders is how many JPEG fallbacks are made at once; default
	// DefaultTranscoders.
	Transcoders int `yaml:"transcoders"`
	// SkipGRPCShedding turns off this package's admission check on gRPC
	// Get. It is implied when the node has a shedding policy
	// (node.Config.Shed), whose interceptor already applies it.
	SkipGRPCShedding bool `yaml:"-"`
	// SendfileMinBytes is the smallest whole-object hit sent from the disk
	// tier's file with sendfile(2); smaller ones are written from memory
	// (with the header, in one writev on the hit path). Default
	// DefaultSendfileMinBytes.
	SendfileMinBytes int64 `yaml:"sendfile_min_bytes"`
	// NoHitPath turns off the hit path (hitpath.go): net/http then serves
	// every HTTP request, plain cached hits included. Off by default.
	NoHitPath bool `yaml:"no_hit_path"`
}

// Peer is a member of the OC.
type Peer struct {
	ID   string // node ID
	Addr string // gRPC address
}

// Router is the part of the client SDK router (*client.Router) the edge
// cache uses: the master's address lists and pooled connections.
type Router interface {
	Route(ctx context.Context, role, business string) (*willowv1.RouteResponse, error)
	Conn(addr string) (*grpc.ClientConn, error)
}

// Deps are the node's collaborators.
type Deps struct {
	// Node is the runtime (region, knobs, gRPC server, metrics); required.
	Node *node.Node
	// Store is the origin for media in the store; required.
	Store store.Store
	// Router finds OC peers (role edgecache) and the upload fronts holding
	// pool-2 media (role upload); optional.
	Router Router
	// Now; default time.Now.
	Now func() time.Time
}

// Sentinel errors; the HTTP and gRPC edges map them to status codes.
var (
	ErrBadRequest = errors.New("malformed media id or variant")
	ErrBadFormat  = fmt.Errorf("%w: unknown format", ErrBadRequest)
	ErrNotFound   = errors.New("media not found")
	ErrProcessing = fmt.Errorf("%w: still processing", ErrNotFound)
	ErrShed       = errors.New("download shed")
	ErrOverload   = errors.New("node overloaded")
	ErrForbidden  = errors.New("bad or expired url signature")
	ErrRange      = errors.New("range not satisfiable")
	ErrOrigin     = errors.New("origin unavailable")
	ErrTooLarge   = errors.New("object too large")
)

// Server is an edge cache node.
type Server struct {
	willowv1.UnimplementedEdgeCacheServer

	cfg    Config
	node   *node.Node
	store  store.Store
	router Router
	now    func() time.Time
	log    *slog.Logger
	self   string
	region string

	lis     net.Listener
	httpSrv *http.Server
	handler http.Handler
	hits    *hitServer // nil with Config.NoHitPath

	mem   *memTier
	hot   *memTier // objects owned by peers, fetched through them
	disk  *diskTier
	group singleflight.Group
	ring  atomic.Pointer[ring.Ring]
	peers atomic.Pointer[map[string]string] // node ID -> gRPC address
	m     *metrics
	acc   *access

	budget      *fillBudget
	transcoders chan struct{} // a slot per running JPEG fallback

	connMu sync.Mutex // guards conns and down
	conns  map[string]*grpc.ClientConn
	down   map[string]time.Time // peer ID -> skipped until
}

// New validates cfg, opens the HTTP listener, registers the EdgeCache gRPC
// service on deps.Node and advertises the HTTP address. Errors: missing
// Node or Store, a bad config, a listener or disk directory that cannot be
// opened.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Node == nil || deps.Store == nil {
		return nil, errors.New("edgecache: Node and Store are required")
	}
	if cfg.CapacityBytes == 0 {
		cfg.CapacityBytes = DefaultCapacityBytes
	}
	if cfg.CapacityBytes < 0 {
		return nil, errors.New("edgecache: negative CapacityBytes")
	}
	if cfg.DiskCapacityBytes <= 0 {
		cfg.DiskCapacityBytes = DefaultDiskCapacityBytes
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if cfg.VirtualNodes <= 0 {
		cfg.VirtualNodes = DefaultVirtualNodes
	}
	if cfg.Hash == nil {
		cfg.Hash = ring.DefaultHash
	}
	if cfg.OriginTimeout <= 0 {
		cfg.OriginTimeout = DefaultOriginTimeout
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.PeerBackoff <= 0 {
		cfg.PeerBackoff = DefaultPeerBackoff
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.MaxObjectBytes <= 0 {
		cfg.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if cfg.SliceBytes <= 0 {
		cfg.SliceBytes = DefaultSliceBytes
	}
	cfg.SliceBytes = max(cfg.SliceBytes, MinSliceBytes)
	if cfg.FillBudgetBytes <= 0 {
		cfg.FillBudgetBytes = DefaultFillBudgetBytes
	}
	cfg.FillBudgetBytes = max(cfg.FillBudgetBytes, cfg.SliceBytes)
	if cfg.FallbackJPEGQuality <= 0 || cfg.FallbackJPEGQuality > 100 {
		cfg.FallbackJPEGQuality = DefaultFallbackQuality
	}
	if cfg.MaxTranscodePixels <= 0 {
		cfg.MaxTranscodePixels = limits.DefaultMaxPixels
	}
	if cfg.Transcoders <= 0 {
		cfg.Transcoders = DefaultTranscoders
	}
	if cfg.SendfileMinBytes <= 0 {
		cfg.SendfileMinBytes = DefaultSendfileMinBytes
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if isNil(deps.Router) {
		deps.Router = nil
	}
	acc, err := newAccess(cfg)
	if err != nil {
		return nil, err
	}
	n := deps.Node
	s := &Server{
		acc:    acc,
		cfg:    cfg,
		node:   n,
		store:  deps.Store,
		router: deps.Router,
		now:    deps.Now,
		log:    n.Logger().With("component", "edgecache"),
		self:   n.Config().ID,
		region: n.Config().Region,
		conns:  make(map[string]*grpc.ClientConn),
		down:   make(map[string]time.Time),
	}
	s.m = newMetrics(n.Registry())
	out := newBytesOutRate(s.m)
	n.AddLoad(func(l *willowv1.Load) { out.fill(l, time.Now()) }) // load.go
	s.budget = newFillBudget(cfg.FillBudgetBytes, s.m.fillBytes)
	s.transcoders = make(chan struct{}, cfg.Transcoders)
	s.mem = newMemTier(cfg.CapacityBytes, func() { s.m.evictions.WithLabelValues("memory").Inc() })
	s.hot = newMemTier(max(cfg.CapacityBytes/8, 1), func() { s.m.evictions.WithLabelValues("hot").Inc() })
	if cfg.DiskDir != "" {
		d, st, err := newDiskTier(cfg.DiskDir, cfg.DiskCapacityBytes, s.log, func() { s.m.evictions.WithLabelValues("disk").Inc() })
		if err != nil {
			return nil, err
		}
		s.log.Info("disk tier loaded", "dir", cfg.DiskDir, "entries", st.Entries, "bytes", st.Bytes, "dropped", st.Dropped)
		s.disk = d
	}
	s.SetPeers(nil)

	lis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("edgecache: listen http %s: %w", cfg.HTTPAddr, err)
	}
	s.lis = s.node.CountListener(lis) // counted as the node's network traffic
	s.handler = s.m.instrument(nosniff(http.HandlerFunc(s.serveHTTP)))
	s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: httpHeaderTimeout, IdleTimeout: httpIdleTimeout, ConnContext: connContext}
	if !cfg.NoHitPath {
		s.hits = newHitServer(s, s.lis, httpIdleTimeout, httpHeaderTimeout)
	}
	if err := n.Guard().Declare(Methods()); err != nil {
		return nil, err
	}
	willowv1.RegisterEdgeCacheServer(n.Server(), s)
	if err := n.SetHTTPAddr(s.HTTPAddr()); err != nil {
		lis.Close()
		return nil, fmt.Errorf("edgecache: %w", err)
	}
	return s, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// HTTPAddr returns the address the HTTP listener is bound to.
func (s *Server) HTTPAddr() string { return s.lis.Addr().String() }

// Handler returns the HTTP handler (GET and HEAD /m/{id}/{variant}).
func (s *Server) Handler() http.Handler { return s.handler }

// SetPeers replaces the ring membership with peers plus this node. Peers
// without an address are ignored, except this node.
func (s *Server) SetPeers(peers []Peer) {
	addrs := map[string]string{}
	ids := []string{s.self}
	for _, p := range peers {
		if p.ID == "" || p.ID == s.self || p.Addr == "" {
			continue
		}
		addrs[p.ID] = p.Addr
		ids = append(ids, p.ID)
	}
	s.peers.Store(&addrs)
	s.ring.Store(ring.New(s.cfg.VirtualNodes, s.cfg.Hash, ids...))
	s.m.members.Set(float64(len(addrs) + 1))
}

// Members returns the node IDs of the current ring, this node included.
func (s *Server) Members() []string { return s.ring.Load().Members() }

// Run serves HTTP and refreshes the ring membership until ctx is done,
// then shuts HTTP down gracefully and closes peer connections. It returns
// nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	var lis net.Listener = sendTimeoutListener{s.lis}
	if s.hits != nil {
		lis = s.hits.handoff // net/http serves what the hit path hands over
		go func() {
			if err := s.hits.serve(); err != nil {
				errc <- err
			}
		}()
	}
	go func() {
		if err := s.httpSrv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	s.log.Info("edge cache serving", "http", s.HTTPAddr())
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	if s.cfg.Peers != nil || s.router != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.refreshLoop(runCtx) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	shCtx, shCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer shCancel()
	if s.hits != nil {
		// First, so that what it hands over meanwhile is still served.
		if serr := s.hits.shutdown(shCtx); serr != nil && err == nil {
			err = fmt.Errorf("edgecache: http shutdown: %w", serr)
		}
	}
	if serr := s.httpSrv.Shutdown(shCtx); serr != nil && err == nil {
		err = fmt.Errorf("edgecache: http shutdown: %w", serr)
	}
	if s.disk != nil {
		s.disk.close()
	}
	s.connMu.Lock()
	for addr, c := range s.conns {
		c.Close()
		delete(s.conns, addr)
	}
	s.connMu.Unlock()
	return err
}

func (s *Server) refreshLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.RefreshInterval)
	defer t.Stop()
	for {
		s.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reloads the membership; on failure the last one is kept.
func (s *Server) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	var peers []Peer
	if s.cfg.Peers != nil {
		ps, err := s.cfg.Peers(ctx)
		if err != nil {
			s.log.Warn("peer refresh failed", "err", err)
			return
		}
		peers = ps
	} else {
		rr, err := s.router.Route(ctx, "edgecache", "")
		if err != nil {
			s.log.Warn("peer refresh failed", "err", err)
			return
		}
		for _, ep := range append(rr.GetPrimary(), rr.GetSecondary()...) {
			if ep.GetRegion() == s.region {
				peers = append(peers, Peer{ID: ep.GetNodeId(), Addr: ep.GetAddr()})
			}
		}
	}
	s.SetPeers(peers)
}

// peerDown reports whether peer failed within the last PeerBackoff.
func (s *Server) peerDown(peer string) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	until, ok := s.down[peer]
	if ok && !s.now().Before(until) {
		delete(s.down, peer)
		return false
	}
	return ok
}

// markDown skips peer for PeerBackoff.
func (s *Server) markDown(peer string) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.down[peer] = s.now().Add(s.cfg.PeerBackoff)
}

// conn returns a pooled connection to a gRPC address.
func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	if s.router != nil {
		return s.router.Conn(addr)
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	c, err := s.node.Dial(addr)
	if err != nil {
		return nil, err
	}
	s.conns[addr] = c
	return c, nil
}
