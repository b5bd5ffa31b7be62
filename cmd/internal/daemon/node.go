package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/auth"
	"willow/client"
	"willow/node"
	"willow/redisconn"
	"willow/shedding"
)

// NodeSection is the node: section of every service's config file: the
// node runtime's own Config (its yaml tags: id, region, zone, group, grpc,
// admin, advertise, advertise_http, master, heartbeat_interval,
// shutdown_grace, capacity) and the node's credentials.
type NodeSection struct {
	node.Config `yaml:",inline"`
	// ClusterSecret authenticates nodes to each other without TLS
	// (package auth); it may also come from -cluster-secret or
	// $WILLOW_CLUSTER_SECRET. With mutual TLS (-tls-ca) it may be empty.
	ClusterSecret string `yaml:"cluster_secret"`
	// Operators is the file of named operator identities (auth.Operators).
	Operators string `yaml:"operators"`
	// UploadSecret verifies client upload tokens on every call; default
	// $WILLOW_UPLOAD_SECRET.
	UploadSecret string `yaml:"upload_secret"`
}

// nodeFlags are the node: section's flags (NodeSection's keys) for role:
// -advertise-http for the roles that serve HTTP (the edge's GETs, the
// front's tus/IETF uploads), -region and -master for every role but the
// master.
func nodeFlags(role string) []Flag {
	fl := []Flag{
		{Name: "id", Usage: "node ID (default ROLE-REGION-1; the master's master-1)"},
		{Name: "grpc", Usage: "gRPC listen address (default 127.0.0.1:0)"},
		{Name: "admin", Usage: "admin HTTP listen address: /metrics, /healthz (default 127.0.0.1:0)"},
		{Name: "advertise", Usage: "gRPC HOST:PORT registered with the master, given to clients and peers (default $POD_IP with the -grpc port; required when -grpc binds 0.0.0.0 or [::] without $POD_IP)"},
		{Name: "cluster-secret", Usage: "cluster secret nodes authenticate with when not on mutual TLS (default $WILLOW_CLUSTER_SECRET)"},
		{Name: "operators", Usage: "file of named operator identities, name: {sha256, roles} (default $WILLOW_OPERATORS)"},
		{Name: "upload-secret", Usage: "upload-token HMAC secret clients' calls are verified with (default $WILLOW_UPLOAD_SECRET)"},
	}
	if role == "edgecache" || role == "upload" {
		fl = append(fl, Flag{Name: "advertise-http", Usage: "HTTP HOST:PORT registered with the master (default $POD_IP with the -http port; required when -http binds 0.0.0.0 or [::] without $POD_IP)"})
	}
	if role != "master" {
		fl = append(fl, Flag{Name: "region", Usage: "region (required)"},
			Flag{Name: "master", Usage: "master gRPC address(es), comma-separated (default $WILLOW_MASTER); empty runs without a master"})
	}
	return fl
}

// tlsFlags registers the TLS flags, which have no config keys.
func (d *Daemon) tlsFlags() {
	d.FS.StringVar(&d.tls[0], "tls-cert", "", "PEM certificate: serve gRPC over TLS (with -tls-key)")
	d.FS.StringVar(&d.tls[1], "tls-key", "", "PEM private key of -tls-cert")
	d.FS.StringVar(&d.tls[2], "tls-ca", "", "PEM CA bundle: verify servers with it and require client certificates (mutual TLS)")
}

// ErrNoNodeCredentials is returned by Node for a node that would run
// with its doors open: no cluster secret and no mutual TLS.
var ErrNoNodeCredentials = errors.New("need node credentials: -cluster-secret (or node.cluster_secret, $WILLOW_CLUSTER_SECRET) or mutual TLS (-tls-cert, -tls-key, -tls-ca)")

// NodeConfig returns the node runtime's config the parsed node: section
// and flags give: the TLS flags and the credentials (package auth)
// applied and, except for the master, the shared admission policy
// (package shedding) installed; each service declares its own methods'
// classes on it. It refuses (ErrNoNodeCredentials) a
// node without a cluster secret or mutual TLS, and the shipped
// placeholder secrets.
func (d *Daemon) NodeConfig() (node.Config, error) {
	ns := d.ns
	if err := d.checkAdvertise(ns); err != nil {
		return node.Config{}, err
	}
	srvTLS, cliTLS, err := node.LoadTLS(d.tls[0], d.tls[1], d.tls[2])
	if err != nil {
		return node.Config{}, err
	}
	if ns.ClusterSecret == "" && (srvTLS == nil || srvTLS.ClientCAs == nil) {
		return node.Config{}, ErrNoNodeCredentials
	}
	for _, s := range []struct{ what, v string }{{"cluster secret", ns.ClusterSecret}, {"upload secret", ns.UploadSecret}} {
		if err := RefusePlaceholder(s.what, s.v); err != nil {
			return node.Config{}, err
		}
	}
	ac := &auth.Config{ClusterSecret: ns.ClusterSecret, UploadSecret: []byte(ns.UploadSecret)}
	if ns.Operators != "" {
		if ac.Operators, err = auth.LoadOperators(ns.Operators); err != nil {
			return node.Config{}, err
		}
	}
	cfg := ns.Config
	cfg.Role, cfg.AdvertiseHost, cfg.Logger = d.role, d.Getenv("POD_IP"), d.Log
	cfg.TLS, cfg.ClientTLS, cfg.Auth = srvTLS, cliTLS, ac
	if d.role != "master" {
		cfg.Shed = &shedding.Config{} // each service declares its methods' classes
	} else if cfg.StreamWorkers == 0 {
		cfg.StreamWorkers = node.MasterStreamWorkers
	}
	return cfg, nil
}

// Start builds the node (NodeConfig, then node.New), the store when the
// service has a store: section, and the Router when the node has a
// master. A node without a region, which every role but the master needs,
// is refused naming -region.
func (d *Daemon) Start() error {
	cfg, err := d.NodeConfig()
	if err != nil {
		return err
	}
	n, err := node.New(cfg)
	if errors.Is(err, node.ErrNoRegion) {
		return fmt.Errorf("need -region (or node.region in the config): %w", err)
	}
	if err != nil {
		return err
	}
	d.ncfg, d.Node = cfg, n
	if d.st != nil {
		if d.Store, err = OpenStore(*d.st); err != nil {
			return err
		}
	}
	if cfg.MasterAddr == "" {
		return nil
	}
	r, err := client.NewRouter(client.RouterConfig{TLS: cfg.ClientTLS, Credentials: n.Credentials(), MasterAddr: cfg.MasterAddr, Region: cfg.Region})
	if err != nil {
		return err
	}
	d.onClose(func() { r.Close() })
	d.Router = r
	return nil
}

// Redis opens the Redis *url names (redisconn.Open), closed with the
// daemon; an empty *url is first set from $WILLOW_REDIS. No URL is an
// error naming -redis, ROLE.redis and $WILLOW_REDIS, the places it comes
// from.
func (d *Daemon) Redis(url *string) (redis.UniversalClient, error) {
	d.Default(url, "WILLOW_REDIS")
	if *url == "" {
		return nil, fmt.Errorf("need -redis URL (or %s.redis in the config, or $WILLOW_REDIS)", d.role)
	}
	return d.OptionalRedis(url)
}

// OptionalRedis is Redis for a service that runs without one: no URL
// (nor $WILLOW_REDIS) gives no client (nil) and no error.
func (d *Daemon) OptionalRedis(url *string) (redis.UniversalClient, error) {
	d.Default(url, "WILLOW_REDIS")
	if *url == "" {
		return nil, nil
	}
	rdb, err := redisconn.Open(*url)
	if err != nil {
		return nil, err
	}
	d.onClose(func() { rdb.Close() })
	return rdb, nil
}

// ServeHTTP listens on addr for h (what names it in errors) and returns
// the address it listens on; Serve then serves it until its context ends
// and shuts it down gracefully. An empty addr serves nothing ("", nil).
func (d *Daemon) ServeHTTP(what, addr string, h http.Handler) (string, error) {
	if addr == "" {
		return "", nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	d.Log.Info(what+" serving", "addr", l.Addr().String())
	d.httpAddrs[what] = l.Addr().String()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.loops = append(d.loops, func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(l) }()
		select {
		case err := <-errc:
			return fmt.Errorf("%s: %w", what, err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	})
	return l.Addr().String(), nil
}
