// Package daemon is what Willow's service mains share, so that each main
// only names its service's own section and flags:
//
//   - the binary (Service, Main): a main declares its role, the shared
//     sections its config file has (Has: Store, Limits), its own section's
//     type (the service's Config, or a struct inlining it, WithRedis), its
//     flags and how it builds and serves the service; Service makes the
//     Daemon, parses, and closes what it opened;
//   - the config file (File): -config FILE is decoded strictly (an unknown
//     key, or a section the service does not have, is an error) straight
//     into the sections, which are the services' own Config types (their
//     yaml tags); the flags given on the command line then override it
//     (Daemon.Parse);
//   - the flags: every flag is a row of a table (Flag) naming the config
//     key it sets, its type the key's, so a flag and its key are declared
//     once, together;
//   - the node: section (NodeSection: node.Config plus the credentials)
//     and its flags (-id, -region, -grpc, -admin, -advertise,
//     -advertise-http, -master, -tls-cert, -tls-key, -tls-ca,
//     -cluster-secret, -operators, -upload-secret);
//   - the store: section (StoreConfig, the same place in every service
//     that has a store) and its flags (-store, -s3-*), secrets from the
//     environment or files, never only the command line, the shipped
//     CHANGE-ME placeholders refused;
//   - the environment defaults: $WILLOW_CLUSTER_SECRET, $WILLOW_OPERATORS,
//     $WILLOW_UPLOAD_SECRET, $WILLOW_MASTER (every service but the master
//     itself), $WILLOW_REDIS, $WILLOW_S3_*, $POD_IP;
//   - building the node with the shared admission policy, the Router,
//     Redis, the store and the buffer pools, closing them at the end, and
//     serving until SIGINT or SIGTERM.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.yaml.in/yaml/v3"

	"willow/client"
	"willow/node"
	"willow/store"
)

// Process is a service main's side of its process: where its logs go,
// the environment and, for tests that run the main in process, a hook
// called once the service serves.
type Process struct {
	Stderr io.Writer
	// Getenv reads the environment; nil reads nothing.
	Getenv func(string) string
	// Ready, when set, is called once the service serves with its node
	// and the addresses of its other HTTP listeners by name (ServeHTTP:
	// the master's "console").
	Ready func(n *node.Node, http map[string]string)
}

// Daemon is one service process being set up: its flags, its logger and,
// once started, its node, store and Router, and what to close when it
// ends. Service creates it (New), registers the service's own flags on FS
// and Parses; the service's serve then Starts, builds the service and
// Serves.
type Daemon struct {
	// FS is the flag set; the service registers its own flags on it,
	// bound to its section of the file type, before Parse.
	FS *flag.FlagSet
	// Log is the service's logger (text on Process.Stderr).
	Log *slog.Logger
	// Node, Store and Router are set by Start: the node, the store of the
	// store: section (nil for a service without one) and a Router on the
	// node's master(s) and region (nil without a master).
	Node   *node.Node
	Store  store.Store
	Router *client.Router

	role       string
	proc       Process
	httpAddrs  map[string]string // ServeHTTP listeners by name
	config     string
	ns         *NodeSection
	st         *StoreConfig
	tls        [3]string // cert, key, CA
	s3Flag     bool      // -s3-secret-key given
	s3FileFlag bool      // -s3-secret-key-file given
	ncfg       node.Config
	loops      []func(context.Context) error // served next to the service's (ServeHTTP)
	closers    []func()
}

// New returns a Daemon for the service role in the process p.
func New(role string, p Process) *Daemon {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(p.Stderr)
	d := &Daemon{FS: fs, Log: slog.New(slog.NewTextHandler(p.Stderr, nil)), role: role, proc: p, httpAddrs: map[string]string{}}
	fs.StringVar(&d.config, "config", "", "YAML config file: section node:, the service's own section (and store:, limits:); flags override it")
	return d
}

// Getenv reads the environment variable k.
func (d *Daemon) Getenv(k string) string {
	if d.proc.Getenv == nil {
		return ""
	}
	return d.proc.Getenv(k)
}

// Default sets *dst from the environment variable k when it is empty.
func (d *Daemon) Default(dst *string, k string) {
	if *dst == "" {
		*dst = d.Getenv(k)
	}
}

// Secret sets *dst from the environment variable k when it is empty and
// refuses the shipped placeholder (RefusePlaceholder), naming the secret
// what.
func (d *Daemon) Secret(dst *string, k, what string) error {
	d.Default(dst, k)
	return RefusePlaceholder(what, *dst)
}

// Parse registers the shared flags, bound to ns and (when not nil) st,
// parses args, decodes -config (if given) into file, whose node: and
// store: sections ns and st are, and parses args again so that the flags
// given override the file. It then fills what is still empty from the
// environment.
func (d *Daemon) Parse(args []string, file any, ns *NodeSection, st *StoreConfig) error {
	d.ns, d.st = ns, st
	if err := d.bind("node", nodeFlags(d.role), ns); err != nil {
		return err
	}
	d.tlsFlags()
	if st != nil {
		if err := d.bind("store", storeFlags, st); err != nil {
			return err
		}
		d.s3SecretFlags(st)
	}
	if err := d.FS.Parse(args); err != nil {
		return err
	}
	if d.FS.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", d.FS.Arg(0))
	}
	if d.config != "" {
		if err := LoadYAML(d.config, file); err != nil {
			return err
		}
		if err := d.FS.Parse(args); err != nil {
			return err
		}
	}
	d.Default(&ns.ClusterSecret, "WILLOW_CLUSTER_SECRET")
	d.Default(&ns.Operators, "WILLOW_OPERATORS")
	d.Default(&ns.UploadSecret, "WILLOW_UPLOAD_SECRET")
	if d.role == "master" {
		ns.Region, ns.MasterAddr = "", "" // a master has neither
	} else {
		d.Default(&ns.MasterAddr, "WILLOW_MASTER")
	}
	if ns.ID == "" && d.role == "master" {
		ns.ID = "master-1"
	} else if ns.ID == "" && ns.Region != "" {
		ns.ID = d.role + "-" + ns.Region + "-1"
	}
	if st != nil {
		return d.storeEnv(st)
	}
	return nil
}

// LoadYAML reads a YAML file into v; unknown keys are errors.
func LoadYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := DecodeYAML(b, v); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// DecodeYAML decodes a config document into v as LoadYAML does: unknown
// keys are errors, durations are written as "30s", and an empty document
// leaves v as it is.
func DecodeYAML(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// onClose runs fn when the daemon closes (last in, first out).
func (d *Daemon) onClose(fn func()) { d.closers = append(d.closers, fn) }

// Close closes what the daemon opened: the Router, Redis, the pools. The
// node closes when Serve returns.
func (d *Daemon) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// Serve runs the node, every service loop and the HTTP servers of
// ServeHTTP until ctx is done or one of them ends; the first to end stops
// the others. Once everything runs it logs the addresses and calls
// Process.Ready. It returns the errors they ended with. Call it after
// Start.
func (d *Daemon) Serve(ctx context.Context, loops ...func(context.Context) error) error {
	n := d.Node
	return Serve(ctx, n, func() {
		d.Log.Info(d.role+" serving", "grpc", n.Addr(), "http", n.Info().GetHttpAddr(), "admin", n.AdminAddr())
		if d.proc.Ready != nil {
			d.proc.Ready(n, d.httpAddrs)
		}
	}, append(loops, d.loops...)...)
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
