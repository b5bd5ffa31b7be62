// Package daemon is what Willow's service mains share: the node: section
// of their YAML config files and the flags that override it (-config, -id,
// -region, -grpc, -admin, -advertise, -advertise-http, -master, -tls-cert,
// -tls-key, -tls-ca, -cluster-secret, -operators, -upload-secret), the
// object store section and its flags (secrets from the environment or
// files, never only the command line; the shipped CHANGE-ME placeholders
// refused), strict config loading (an unknown key
// is an error), building the node with the shared admission policy, and
// serving until SIGINT or SIGTERM.
package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
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

	"willow/auth"
	"willow/node"
	"willow/shedding"
	"willow/store"
	fsstore "willow/store/fs"
	"willow/store/s3"
)

// NodeConfig is the node: section of every service's config file.
type NodeConfig struct {
	ID                string        `yaml:"id"`
	Region            string        `yaml:"region"`
	Zone              string        `yaml:"zone"`
	Group             string        `yaml:"group"`
	GRPC              string        `yaml:"grpc"`
	Admin             string        `yaml:"admin"`
	Advertise         string        `yaml:"advertise"`      // gRPC address given to the master; default $POD_IP with the gRPC port
	AdvertiseHTTP     string        `yaml:"advertise_http"` // edge caches: HTTP address given to the master; default $POD_IP with the HTTP port
	Master            string        `yaml:"master"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	ShutdownGrace     time.Duration `yaml:"shutdown_grace"`
	Capacity          int32         `yaml:"capacity"`
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

// S3Config is an S3 store in a config file.
type S3Config struct {
	Endpoint  string `yaml:"endpoint"`
	Bucket    string `yaml:"bucket"`
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
	// SecretKeyFile names a file holding the secret key (a mounted
	// Secret); see S3SecretKey for the order of the sources.
	SecretKeyFile string `yaml:"secret_key_file"`
	Region        string `yaml:"region"`
	Secure        bool   `yaml:"secure"`
	PartSize      int64  `yaml:"part_size"`
}

// Flags are the flags every service main takes. Register the service's own
// flags on FS before Parse.
type Flags struct {
	FS *flag.FlagSet
	// Getenv reads $POD_IP and $WILLOW_S3_*; default os.Getenv.
	Getenv func(string) string

	config, id, region, grpc, admin, master *string
	advertise, advertiseHTTP                *string
	s3SecretFile                            *string
	tlsCert, tlsKey, tlsCA                  *string
	clusterSecret, operators, uploadSecret  *string
	storeDir                                *string
	s3                                      [4]*string // endpoint, bucket, access key, secret key
}

// NewFlags registers the shared flags for the service name (the master
// takes no -region or -master). With store set it also registers -store
// and the -s3-* flags.
func NewFlags(name string, stderr io.Writer, store bool) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &Flags{FS: fs, Getenv: os.Getenv}
	f.config = fs.String("config", "", "YAML config file (section node: plus the service's own)")
	f.id = fs.String("id", "", "node ID (default ROLE-REGION-1)")
	f.grpc = fs.String("grpc", "", "gRPC listen address (default 127.0.0.1:0)")
	f.admin = fs.String("admin", "", "admin HTTP listen address: /metrics, /healthz (default 127.0.0.1:0)")
	f.advertise = fs.String("advertise", "", "gRPC HOST:PORT registered with the master, given to clients and peers (default $POD_IP with the -grpc port; required when -grpc binds 0.0.0.0 or [::] without $POD_IP)")
	if name == "edgecache" || name == "upload" { // the edge's HTTP GETs, the front's tus/IETF uploads
		f.advertiseHTTP = fs.String("advertise-http", "", "HTTP HOST:PORT registered with the master (default $POD_IP with the -http port; required when -http binds 0.0.0.0 or [::] without $POD_IP)")
	}
	if name != "master" {
		f.region = fs.String("region", "", "region")
		f.master = fs.String("master", "", "master gRPC address(es), comma-separated; empty runs without a master")
	}
	f.tlsCert = fs.String("tls-cert", "", "PEM certificate: serve gRPC over TLS (with -tls-key)")
	f.tlsKey = fs.String("tls-key", "", "PEM private key of -tls-cert")
	f.tlsCA = fs.String("tls-ca", "", "PEM CA bundle: verify servers with it and require client certificates (mutual TLS)")
	f.clusterSecret = fs.String("cluster-secret", "", "cluster secret nodes authenticate with when not on mutual TLS (default $WILLOW_CLUSTER_SECRET)")
	f.operators = fs.String("operators", "", "file of named operator identities, name: {sha256, roles} (default $WILLOW_OPERATORS)")
	f.uploadSecret = fs.String("upload-secret", "", "upload-token HMAC secret clients' calls are verified with (default $WILLOW_UPLOAD_SECRET)")
	if store {
		f.storeDir = fs.String("store", "", "directory store root")
		f.s3[0] = fs.String("s3-endpoint", "", "S3 endpoint host:port (instead of -store)")
		f.s3[1] = fs.String("s3-bucket", "", "S3 bucket")
		f.s3[2] = fs.String("s3-access-key", "", "S3 access key")
		f.s3[3] = fs.String("s3-secret-key", "", "S3 secret key; visible in ps: prefer $WILLOW_S3_SECRET_KEY or -s3-secret-key-file")
		f.s3SecretFile = fs.String("s3-secret-key-file", "", "file holding the S3 secret key (a mounted Secret)")
	}
	return f
}

// Parse parses args, loads -config (if given) into file, then lets the
// shared flags override nc and, when the store flags are registered, dir
// and s3 (either may be nil).
func (f *Flags) Parse(args []string, file any, nc *NodeConfig, dir *string, s3c *S3Config) error {
	if err := f.FS.Parse(args); err != nil {
		return err
	}
	if f.FS.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.FS.Arg(0))
	}
	if *f.config != "" {
		if err := LoadYAML(*f.config, file); err != nil {
			return err
		}
	}
	for _, e := range []struct {
		dst *string
		env string
	}{{&nc.ClusterSecret, "WILLOW_CLUSTER_SECRET"}, {&nc.Operators, "WILLOW_OPERATORS"}, {&nc.UploadSecret, "WILLOW_UPLOAD_SECRET"}} {
		if *e.dst == "" {
			*e.dst = f.getenv(e.env)
		}
	}
	for _, o := range []struct {
		dst *string
		v   *string
	}{{&nc.ID, f.id}, {&nc.Region, f.region}, {&nc.GRPC, f.grpc}, {&nc.Admin, f.admin}, {&nc.Master, f.master},
		{&nc.Advertise, f.advertise}, {&nc.AdvertiseHTTP, f.advertiseHTTP},
		{&nc.ClusterSecret, f.clusterSecret}, {&nc.Operators, f.operators}, {&nc.UploadSecret, f.uploadSecret}} {
		if o.v != nil {
			Override(o.dst, *o.v)
		}
	}
	if f.storeDir != nil {
		if dir != nil {
			Override(dir, *f.storeDir)
		}
		if s3c != nil {
			Override(&s3c.Endpoint, *f.s3[0])
			Override(&s3c.Bucket, *f.s3[1])
			Override(&s3c.AccessKey, *f.s3[2])
			Override(&s3c.SecretKey, *f.s3[3])
			if *f.s3SecretFile != "" {
				s3c.SecretKey, s3c.SecretKeyFile = "", *f.s3SecretFile
			}
			if s3c.Endpoint == "" && (dir == nil || *dir == "") {
				s3c.Endpoint = f.getenv("WILLOW_S3_ENDPOINT")
			}
			if err := f.s3Env(s3c); err != nil {
				return err
			}
		}
	}
	return nil
}

// Override sets *dst to v when v is not empty.
func Override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// LoadYAML reads a YAML file into v; unknown keys are errors.
func LoadYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// TLS returns the server and client TLS configs the -tls-* flags name
// (both nil: plaintext).
func (f *Flags) TLS() (server, client *tls.Config, err error) {
	return node.LoadTLS(*f.tlsCert, *f.tlsKey, *f.tlsCA)
}

// ErrNoNodeCredentials is returned by NodeConfig for a node that would
// run with its doors open: no cluster secret and no mutual TLS.
var ErrNoNodeCredentials = errors.New("need node credentials: -cluster-secret (or node.cluster_secret, $WILLOW_CLUSTER_SECRET) or mutual TLS (-tls-cert, -tls-key, -tls-ca)")

// NodeConfig returns the node runtime's config for role from nc, with the
// TLS flags and the credentials (package auth) applied and, except for the
// master, the shared admission policy (shedding.ServiceConfig) installed.
// It refuses (ErrNoNodeCredentials) to build a node without a cluster
// secret or mutual TLS.
func (f *Flags) NodeConfig(role string, nc NodeConfig, log *slog.Logger) (node.Config, error) {
	if err := f.checkAdvertise(nc); err != nil {
		return node.Config{}, err
	}
	srvTLS, cliTLS, err := f.TLS()
	if err != nil {
		return node.Config{}, err
	}
	mtls := srvTLS != nil && srvTLS.ClientCAs != nil
	if nc.ClusterSecret == "" && !mtls {
		return node.Config{}, ErrNoNodeCredentials
	}
	if err := RefusePlaceholder("cluster secret", nc.ClusterSecret); err != nil {
		return node.Config{}, err
	}
	ac := &auth.Config{ClusterSecret: nc.ClusterSecret, UploadSecret: []byte(nc.UploadSecret)}
	if nc.Operators != "" {
		if ac.Operators, err = auth.LoadOperators(nc.Operators); err != nil {
			return node.Config{}, err
		}
	}
	cfg := node.Config{
		ID: nc.ID, Role: role, Region: nc.Region, Zone: nc.Zone, Group: nc.Group,
		GRPCAddr: nc.GRPC, AdminAddr: nc.Admin, MasterAddr: nc.Master,
		Advertise: nc.Advertise, AdvertiseHTTP: nc.AdvertiseHTTP, AdvertiseHost: f.getenv("POD_IP"),
		HeartbeatInterval: nc.HeartbeatInterval, ShutdownGrace: nc.ShutdownGrace, Capacity: nc.Capacity,
		Logger: log, TLS: srvTLS, ClientTLS: cliTLS, Auth: ac,
	}
	if role != "master" {
		sc := shedding.ServiceConfig()
		cfg.Shed = &sc
	}
	return cfg, nil
}

// OpenStore opens the S3 store when s3c names an endpoint, else the
// directory store at dir.
func OpenStore(dir string, s3c S3Config) (store.Store, error) {
	switch {
	case s3c.Endpoint != "" && dir != "":
		return nil, errors.New("give -store or -s3-endpoint, not both")
	case s3c.Endpoint != "":
		if err := RefusePlaceholder("S3 access key", s3c.AccessKey); err != nil {
			return nil, err
		}
		if err := RefusePlaceholder("S3 secret key", s3c.SecretKey); err != nil {
			return nil, err
		}
		return s3.New(s3.Config{Endpoint: s3c.Endpoint, Bucket: s3c.Bucket, AccessKey: s3c.AccessKey,
			SecretKey: s3c.SecretKey, Region: s3c.Region, Secure: s3c.Secure, PartSize: s3c.PartSize})
	case dir != "":
		return fsstore.New(dir)
	}
	return nil, errors.New("need -store DIR or -s3-endpoint (or the store section of the config)")
}

// Serve runs n and every service loop until ctx is done or one of them
// ends; the first to end stops the others. ready, when set, is called once
// everything runs. It returns the errors they ended with.
func Serve(ctx context.Context, n *node.Node, ready func(), loops ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	all := append([]func(context.Context) error{n.Run}, loops...)
	errc := make(chan error, len(all))
	for _, run := range all {
		go func() { errc <- run(ctx) }()
	}
	if ready != nil {
		ready()
	}
	var errs []error
	for range all {
		errs = append(errs, <-errc)
		cancel()
	}
	return errors.Join(errs...)
}

// Main runs run with a context cancelled on SIGINT or SIGTERM and exits: 0
// on success or -h, 1 with "name: error" on stderr otherwise.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
