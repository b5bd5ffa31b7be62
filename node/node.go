package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"

	"willow/auth"
	"willow/buildinfo"
	"willow/flex"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
)

// Defaults.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultShutdownGrace     = 10 * time.Second
)

// MasterStreamWorkers is Config.StreamWorkers for a master's node (the
// mains set it when the config leaves it 0): a master serves a fleet's
// heartbeats, thousands of short calls a second, most of them waiting a
// few milliseconds for their Redis batch.
const MasterStreamWorkers = 512

// Config configures a node. Zero values mean the documented default. The
// yaml tags are the keys of the node: section of every service's config
// file; the fields tagged "-" are set by code.
type Config struct {
	// ID is the node's stable name ([a-z0-9-]); required.
	ID string `yaml:"id"`
	// Role is upload, compress, edgecache, timeline or master; required.
	Role string `yaml:"-"`
	// Region is the node's region; required except for the master.
	Region string `yaml:"region"`
	// Zone is the OC or zone inside the region; default: the region.
	Zone string `yaml:"zone"`
	// Group is a named node group for staged flex rollouts; optional.
	Group string `yaml:"group"`
	// GRPCAddr is the gRPC listen address; default 127.0.0.1:0.
	GRPCAddr string `yaml:"grpc"`
	// AdminAddr is the admin HTTP listen address; default 127.0.0.1:0.
	AdminAddr string `yaml:"admin"`
	// HTTPAddr is the public HTTP address the node advertises (edge
	// caches), normally set through SetHTTPAddr from the HTTP listener.
	HTTPAddr string `yaml:"-"`
	// Advertise is the gRPC address registered with the master, which
	// hands it to clients and peers (Route, edge ring, pool-2 reads).
	// Default: AdvertiseHost with the gRPC listen port when AdvertiseHost
	// is set, else the listen address. A node listening on an unspecified
	// address (0.0.0.0, [::], empty host) with neither is refused
	// (ErrNoAdvertise).
	Advertise string `yaml:"advertise"`
	// AdvertiseHTTP is the HTTP address advertised instead of the HTTP
	// listener's (SetHTTPAddr); default AdvertiseHost with the listen
	// port, else the listen address, under the same rule as Advertise.
	AdvertiseHTTP string `yaml:"advertise_http"`
	// AdvertiseHost is the default host of the advertised addresses (the
	// pod IP, $POD_IP); optional.
	AdvertiseHost string `yaml:"-"`
	// MasterAddr is the master's gRPC address; empty runs without a master.
	MasterAddr string `yaml:"master"`
	// HeartbeatInterval; default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// ShutdownGrace bounds graceful shutdown; default DefaultShutdownGrace.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// Capacity is the node's relative capacity weight; default 1.
	Capacity int32 `yaml:"capacity"`
	// StreamWorkers is how many goroutines the gRPC server keeps to run
	// calls on; a call that finds none free runs on a goroutine of its
	// own, as every call does with 0 (the default). A kept worker's stack
	// has grown to what the handlers need, so it saves each call the
	// goroutine start and the stack growth: about 6 % of the master's CPU
	// at 5000 heartbeats a second (BenchmarkFleet). The mains give a
	// master's node MasterStreamWorkers.
	StreamWorkers int `yaml:"stream_workers"`
	// Logger; default slog.Default().
	Logger *slog.Logger `yaml:"-"`
	// Unary and Stream are extra server interceptors, run inside
	// metrics, logging, the guard, stats, drills and shedding, and outside
	// panic recovery (chain.go).
	Unary  []grpc.UnaryServerInterceptor  `yaml:"-"`
	Stream []grpc.StreamServerInterceptor `yaml:"-"`
	// TLS, when set, serves gRPC over TLS.
	TLS *tls.Config `yaml:"-"`
	// ClientTLS, when set, is used to dial the master and other nodes.
	ClientTLS *tls.Config `yaml:"-"`
	// Auth, when set, authenticates every call (package auth): services
	// declare their method tables on Guard. Nil leaves calls
	// unauthenticated (auth.Open: in-process tests only; the mains refuse
	// to start without credentials). Auth.ClusterSecret is also what this
	// node presents when it dials other nodes without TLS.
	Auth *auth.Config `yaml:"-"`
	// Shed, when set, installs the shared admission policy (shedding) on
	// every RPC, reading this node's live knobs; health checks and
	// reflection are always exempt, and each service declares its own
	// methods' classes on Shedder (shedding.Shedder.Declare).
	Shed *shedding.Config `yaml:"-"`
	// Gauges, when set, is called every heartbeat for role-specific load
	// figures (pool bytes, held items, ...).
	Gauges func() map[string]float64 `yaml:"-"`
	// QueueMs, when set, reports the mean queueing time over the last
	// second (the shedding package provides it).
	QueueMs func() float64 `yaml:"-"`
	// Now; default time.Now.
	Now func() time.Time `yaml:"-"`
	// SharedProcess says other nodes run in this process (willow up, the
	// one-box cluster): its RSS and disk counters are the process's, and
	// heartbeats say so (Load.shared_process).
	SharedProcess bool `yaml:"-"`
}

// ErrNoRegion is returned (wrapped) by New for a node of any role but the
// master without a Region.
var ErrNoRegion = errors.New("a region is required")

// Node is a running service process. Create with New, register services
// on Server, then Run.
type Node struct {
	hooks   loadHooks // loadsignals.go
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	grpc    *grpc.Server
	health  *health.Server
	lis     net.Listener
	adminL  net.Listener
	adminMx *http.ServeMux
	rpc     *rpcMetrics // the gRPC server series (chain.go)
	stats   *stats
	net     netCounters // bytes through the gRPC and counted HTTP listeners

	addr, adminAddr string // advertised gRPC and admin addresses

	flex  atomic.Pointer[willowv1.FlexState]
	knobs atomic.Pointer[flex.Knobs] // effective knobs of flex, made once per change

	mu        sync.Mutex // guards callbacks and drills
	callbacks []func(flex.Knobs)
	drills    []*willowv1.Drill
	hasDrills atomic.Bool // len(drills) > 0, for the per-request fast path

	shedder *shedding.Shedder
	guard   *auth.Guard
	// unaryExtra and streamExtra are Config.Unary and Config.Stream
	// folded into one interceptor each, nil when there are none.
	unaryExtra  grpc.UnaryServerInterceptor
	streamExtra grpc.StreamServerInterceptor
	creds       auth.NodeCredentials

	flexVersion prometheus.Gauge
	flexLevel   *prometheus.GaugeVec
	registered  atomic.Bool
	silenced    atomic.Bool
	draining    atomic.Bool
}

// New validates cfg, opens the listeners and builds the gRPC server.
func New(cfg Config) (*Node, error) {
	switch {
	case cfg.Role == "":
		return nil, errors.New("node: Role is required")
	case cfg.Region == "" && cfg.Role != "master":
		return nil, fmt.Errorf("node: %s: %w", cfg.Role, ErrNoRegion)
	case cfg.ID == "":
		return nil, errors.New("node: ID is required")
	}
	if cfg.Zone == "" {
		cfg.Zone = cfg.Region
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.ID, "role", cfg.Role, "region", cfg.Region),
		reg:     prometheus.NewRegistry(),
		adminMx: http.NewServeMux(),
		stats:   newStats(),
	}
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	n.rpc = newRPCMetrics()
	n.reg.MustRegister(n.rpc.collectors()...)
	n.flexVersion = prometheus.NewGauge(prometheus.GaugeOpts{Name: "willow_flex_version", Help: "Version of the flex state this node runs."})
	n.flexLevel = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "willow_flex_level", Help: "1 for the flex level this node runs."}, []string{"level"})
	n.reg.MustRegister(n.flexVersion, n.flexLevel)
	n.flexLevel.WithLabelValues("normal").Set(1)
	defaults := flex.Defaults()
	n.knobs.Store(&defaults)

	n.guard = auth.Open()
	if cfg.Auth != nil {
		g, err := auth.New(*cfg.Auth)
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.guard = g
		n.creds = auth.NodeCredentials{Secret: cfg.Auth.ClusterSecret, ID: cfg.ID, Role: cfg.Role, Instance: auth.NewInstance()}
	}

	if cfg.Shed != nil {
		sc := *cfg.Shed
		sc.Methods = maps.Clone(sc.Methods)
		if sc.Methods == nil {
			sc.Methods = shedding.Classes{}
		}
		for _, m := range []string{healthpb.Health_Check_FullMethodName, healthpb.Health_Watch_FullMethodName,
			"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
			"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"} {
			sc.Methods[m] = shedding.Exempt
		}
		sh, err := shedding.New(sc, shedding.Deps{Knobs: n.Knobs, Registerer: n.reg, Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.shedder = sh
		n.callbacks = append(n.callbacks, sh.ApplyKnobs)
		if cfg.QueueMs == nil {
			cfg.QueueMs = sh.QueueMs
		}
		n.cfg = cfg
	}

	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("node: listen grpc %s: %w", cfg.GRPCAddr, err)
	}
	adminL, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("node: listen admin %s: %w", cfg.AdminAddr, err)
	}
	n.lis, n.adminL = n.CountListener(lis), adminL
	if n.addr, err = advertised(cfg.Advertise, cfg.AdvertiseHost, lis.Addr().String()); err != nil {
		lis.Close()
		adminL.Close()
		return nil, fmt.Errorf("node: gRPC: %w: set -advertise HOST:PORT (node.advertise in the config) or $POD_IP", err)
	}
	n.adminAddr = adminL.Addr().String()
	if Unspecified(n.adminAddr) {
		// The admin port on the host the gRPC address is advertised on.
		host, _, _ := net.SplitHostPort(n.addr)
		_, port, _ := net.SplitHostPort(n.adminAddr)
		n.adminAddr = net.JoinHostPort(host, port)
	}

	n.unaryExtra, n.streamExtra = chainUnary(cfg.Unary), chainStream(cfg.Stream)
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(n.unaryInterceptor),
		grpc.StreamInterceptor(n.streamInterceptor),
		grpc.MaxRecvMsgSize(4 << 20),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)))
	}
	n.grpc = grpc.NewServer(opts...)
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpc, n.health)
	reflection.Register(n.grpc)

	n.adminMx.Handle("/metrics", n.adminGuard(RouteMetrics, promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg})))
	n.adminMx.Handle("/healthz", n.adminGuard(RouteHealthz, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if n.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "draining")
			return
		}
		fmt.Fprintln(w, "ok")
	})))
	n.handlePprof()
	return n, nil
}

// Shedder is the node's admission policy, nil when Config.Shed was nil.
func (n *Node) Shedder() *shedding.Shedder { return n.shedder }

// UserHash is the cluster's one user hash, keyed by Config.Shed.UserKey
// (default shedding.DefaultUserKey): services that rank, shed or hold
// users read it, so they pick the same users.
func (n *Node) UserHash() shedding.UserHash {
	if n.shedder != nil {
		return n.shedder.UserHash()
	}
	return shedding.NewUserHash(nil)
}

// Guard is the node's call guard: each service declares its method table
// on it (Guard().Declare) when it registers.
func (n *Node) Guard() *auth.Guard { return n.guard }

// Credentials are what this node presents when it calls another node
// (cluster secret, ID, role, instance key); empty without Config.Auth or
// with TLS only.
func (n *Node) Credentials() auth.NodeCredentials { return n.creds }

// Dial opens a connection to another node with this node's TLS client
// configuration and credentials attached to every call.
func (n *Node) Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return Dial(addr, n.cfg.ClientTLS, append([]grpc.DialOption{grpc.WithPerRPCCredentials(n.creds)}, opts...)...)
}

// Server is the gRPC server to register services on before Run.
func (n *Node) Server() *grpc.Server { return n.grpc }

// Registry is the node's Prometheus registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// AdminMux is the admin HTTP mux; services may add handlers before Run.
func (n *Node) AdminMux() *http.ServeMux { return n.adminMx }

// Addr is the gRPC listen address.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// AdminAddr is the admin HTTP listen address.
func (n *Node) AdminAddr() string { return n.adminL.Addr().String() }

// AdvertisedAddr is the gRPC address the node registers with the master
// (Config.Advertise resolved against the listener).
func (n *Node) AdvertisedAddr() string { return n.addr }

// AdvertisedAdminAddr is the admin address the node registers: the admin
// listen address, or, when that is unspecified, its port on the host of
// AdvertisedAddr.
func (n *Node) AdvertisedAdminAddr() string { return n.adminAddr }

// Logger is the node's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

// Config returns the node's configuration with defaults applied.
func (n *Node) Config() Config { return n.cfg }

// Info describes the node as it registers with the master.
func (n *Node) Info() *willowv1.NodeInfo {
	return &willowv1.NodeInfo{
		Id: n.cfg.ID, Role: n.cfg.Role, Region: n.cfg.Region, Zone: n.cfg.Zone,
		Group: n.cfg.Group, Addr: n.addr, HttpAddr: n.cfg.HTTPAddr,
		AdminAddr: n.adminAddr, Capacity: n.cfg.Capacity,
	}
}

// SetHTTPAddr sets the public HTTP address advertised to the master from
// the address the HTTP listener is bound to (edge caches learn theirs
// after New): Config.AdvertiseHTTP, else Config.AdvertiseHost with the
// bound port, else bound itself. It fails with ErrNoAdvertise when bound
// is unspecified and nothing else names a host. Call before Run.
func (n *Node) SetHTTPAddr(bound string) error {
	a, err := advertised(n.cfg.AdvertiseHTTP, n.cfg.AdvertiseHost, bound)
	if err != nil {
		return fmt.Errorf("node: HTTP: %w: set -advertise-http HOST:PORT (node.advertise_http in the config) or $POD_IP", err)
	}
	n.cfg.HTTPAddr = a
	return nil
}

// Flex returns the flex state this node runs (nil before the first one).
func (n *Node) Flex() *willowv1.FlexState { return n.flex.Load() }

// Knobs returns the effective knobs for this node's region and group.
// Hot paths may call it per request: the knobs are derived once per flex
// change. Callers must not modify the ShedRatio map.
func (n *Node) Knobs() flex.Knobs {
	return *n.knobs.Load() // the defaults until the first flex state
}

// OnKnobs registers f to run after every applied flex change. f must not
// block for long.
func (n *Node) OnKnobs(f func(flex.Knobs)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.callbacks = append(n.callbacks, f)
}

// ApplyFlex installs st if it is newer than the current state. Tests and
// standalone nodes may call it; the master's Watch stream uses it too.
func (n *Node) ApplyFlex(st *willowv1.FlexState) { n.applyFlex(st, false) }

// applyFlex installs st when its version is newer than the current one, or
// when force is set and it differs (the first state of a new Watch stream
// is authoritative, even if older: a master whose Redis was lost restarts
// its versions).
func (n *Node) applyFlex(st *willowv1.FlexState, force bool) {
	if st == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur := n.flex.Load(); cur != nil {
		if proto.Equal(cur, st) || (!force && st.GetVersion() <= cur.GetVersion()) {
			return
		}
	}
	k := flex.Effective(st, n.cfg.Region, n.cfg.Group)
	n.flex.Store(st)
	n.knobs.Store(&k)
	n.flexVersion.Set(float64(st.GetVersion()))
	n.flexLevel.Reset()
	n.flexLevel.WithLabelValues(k.Level).Set(1)
	n.log.Info("flex applied", "version", st.GetVersion(), "level", k.Level)
	for _, f := range n.callbacks {
		f(k)
	}
}

// healthNames are the names grpc.health.v1.Health answers for: "" (the
// whole node) and every service registered on Server (willow.v1.Upload,
// ...).
func (n *Node) healthNames() []string {
	names := []string{""}
	for name := range n.grpc.GetServiceInfo() {
		names = append(names, name)
	}
	return names
}

// Drain marks the node as going away before it stops (an upload front
// retiring): grpc.health.v1.Health answers NOT_SERVING for "" and every
// service, and /healthz answers 503 "draining", so load balancers and
// probes send nothing new, while the node keeps serving the calls it gets.
// It cannot be undone; Run's shutdown does the same.
func (n *Node) Drain() {
	if n.draining.Swap(true) {
		return
	}
	for _, name := range n.healthNames() {
		n.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.log.Info("node draining: health NOT_SERVING")
}

// Draining reports whether Drain was called.
func (n *Node) Draining() bool { return n.draining.Load() }

// Run serves until ctx is done, then shuts down gracefully: health turns
// NOT_SERVING (for "" and every service name), in-flight RPCs finish
// (bounded by ShutdownGrace), listeners close. It returns nil after a
// clean shutdown.
func (n *Node) Run(ctx context.Context) error {
	n.rpc.init(n.grpc)
	if !n.draining.Load() {
		for _, name := range n.healthNames() {
			n.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		}
	}
	admin := &http.Server{Handler: n.adminMx, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- n.grpc.Serve(n.lis) }()
	go func() {
		if err := admin.Serve(n.adminL); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if n.cfg.MasterAddr != "" {
		wg.Add(1)
		go func() { defer wg.Done(); n.runMaster(runCtx) }()
	}
	n.log.Info("node serving", "grpc", n.Addr(), "admin", n.AdminAddr(), "advertise", n.addr)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	n.draining.Store(true)
	n.health.Shutdown()
	cancel()
	wg.Wait()
	done := make(chan struct{})
	go func() { n.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(n.cfg.ShutdownGrace):
		n.grpc.Stop()
	}
	sctx, scancel := context.WithTimeout(context.Background(), n.cfg.ShutdownGrace)
	defer scancel()
	_ = admin.Shutdown(sctx)
	n.log.Info("node stopped")
	return err
}
