// Command willow is Willow's CLI: the one-box cluster, uploads and
// downloads, the on-call flex commands, buffer pools, timeline, load runs
// and drills. See README.md and DESIGN.md section 8 for the contract.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"willow/auth"
	"willow/cluster"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"

	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(NewMain().Run(ctx, os.Args[1:]))
}

// Main holds the CLI's outputs and environment, so tests can run it in
// process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string

	pre  globals // global flags given anywhere on the line (Run)
	help bool    // -h or --help was given: commands print their flags to Stdout
}

// NewMain returns a Main on the process's stdio.
func NewMain() *Main { return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

type command struct {
	run   func(ctx context.Context, m *Main, args []string) error
	usage string
	// subs are the subcommands of a command that dispatches on its first
	// argument; `willow CMD --help` shows the flags of the first.
	subs []string
}

func commands() map[string]command {
	return map[string]command{
		"up":       {run: cmdUp, usage: "up [--dir DIR] [--redis URL]: run the one-box cluster"},
		"upload":   {run: cmdUpload, usage: "upload [--upload-id ID] [--user U] [--business B] FILE...: upload media"},
		"download": {run: cmdDownload, usage: "download ID|SIGNED_URL [--variant V] -o FILE: download a variant"},
		"url":      {run: cmdURL, usage: "url ID [--variant V] [--for D] [--edge ADDR] [--user U]: print a signed download URL"},
		"token":    {run: cmdToken, usage: "token --user U --business B: print an upload token"},
		"nodes":    {run: cmdNodes, usage: "nodes [--json]: list nodes and their state"},
		"flex":     {cmdFlex, "flex status|set LEVEL|knob NAME=VALUE...|history|rollback: on-call flex control", []string{"status", "set", "knob", "history", "rollback"}},
		"buffer":   {cmdBuffer, "buffer status|drain --pool N: buffer pools", []string{"status", "drain"}},
		"media":    {cmdMedia, "media status ID [--json] | retry ID: a media item's state (processing, ready, failed) and operator retry", []string{"status", "retry"}},
		"timeline": {cmdTimeline, "timeline follow|publish|poll: timeline", []string{"follow", "publish", "poll"}},
		"load":     {cmdLoad, "load run PROFILE --report DIR: replay a load profile", []string{"run"}},
		"capacity": {cmdCapacity, "capacity plan --calibration report.json --growth uploads=9: capacity review", []string{"plan"}},
		"version":  {run: cmdVersion, usage: "version [--json]: print the version and revision (also willow --version)"},
		"drill":    {run: cmdDrill, usage: "drill latency|errors|silence --node ADDR --for DURATION: fault drills"},
	}
}

// Run runs one command and returns the exit status. The global flags
// (--master, --cluster, --json, --token, --tls-*) may come before or after
// the command and its subcommand; -h or --help anywhere prints the
// command's own flags to stdout and exits 0 without touching a cluster.
func (m *Main) Run(ctx context.Context, args []string) int {
	cmds := commands()
	args, err := m.globalFlags(args)
	if err != nil {
		fmt.Fprintf(m.Stderr, "willow: %s\n", err)
		return 2
	}
	if m.pre.version {
		args = []string{"version"}
	}
	if len(args) == 0 || args[0] == "help" {
		if m.help || len(args) > 0 {
			m.usage(m.Stdout, cmds)
			return 0
		}
		m.usage(m.Stderr, cmds)
		return 2
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(m.Stderr, "willow: unknown command %q\n", args[0])
		m.usage(m.Stderr, cmds)
		return 2
	}
	rest := args[1:]
	if m.help {
		// The command's own flags, on stdout; dispatching commands show
		// those of their first subcommand when none is named.
		fmt.Fprintf(m.Stdout, "usage: willow %s\n", c.usage)
		if len(c.subs) > 0 && (len(rest) == 0 || !slices.Contains(c.subs, rest[0])) {
			rest = []string{c.subs[0]}
		}
		rest = append(rest, "-h")
	}
	if err := c.run(ctx, m, rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(m.Stderr, "willow %s: %s\n", args[0], ue.msg)
			return 2
		}
		fmt.Fprintf(m.Stderr, "willow %s: %s\n", args[0], oneLine(rpcstatus.Line(err)))
		return 1
	}
	return 0
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

func (m *Main) usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: willow [--master ADDR | --cluster FILE] [--token T] [--json] COMMAND [flags] [args]")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %s\n", cmds[n].usage)
	}
	fmt.Fprintln(w, "willow COMMAND --help shows a command's flags; willow --version the build.")
}

// globalValueFlags are the global flags that take a value; json (and
// version, help) take none.
var globalValueFlags = []string{"master", "cluster", "token", "tls-ca", "tls-cert", "tls-key"}

// globalFlags takes the global flags, -h/--help and --version out of args,
// wherever they are before a "--", into m.pre and m.help, and returns the
// rest.
func (m *Main) globalFlags(args []string) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "h" || name == "help":
			m.help = true
		case name == "json" || name == "version":
			b := true
			if hasVal {
				var err error
				if b, err = strconv.ParseBool(val); err != nil {
					return nil, fmt.Errorf("--%s=%s: want true or false", name, val)
				}
			}
			if name == "json" {
				m.pre.json = b
			} else {
				m.pre.version = b
			}
		case slices.Contains(globalValueFlags, name):
			if !hasVal {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("flag needs an argument: --%s", name)
				}
				i++
				val = args[i]
			}
			switch name {
			case "master":
				m.pre.master = val
			case "cluster":
				m.pre.cluster = val
			case "token":
				m.pre.token = val
			case "tls-ca":
				m.pre.tlsCA = val
			case "tls-cert":
				m.pre.tlsCert = val
			case "tls-key":
				m.pre.tlsKey = val
			}
		default:
			rest = append(rest, a)
		}
	}
	return rest, nil
}

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// globals are the flags every cluster command takes.
type globals struct {
	m       *Main
	master  string
	cluster string
	json    bool
	token   string
	file    *cluster.File

	tlsCA, tlsCert, tlsKey string
	tlsConfig              *tls.Config // built from the --tls-* flags by clientTLS

	version bool // --version (Main.pre only)
}

// newFlags returns a flag set with the shared flags --master, --cluster,
// --json and --token registered.
func (m *Main) newFlags(name string) (*flag.FlagSet, *globals) {
	fs := flag.NewFlagSet("willow "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	if m.help {
		fs.SetOutput(m.Stdout)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "flags of willow %s (global flags may also come before the command):\n", name)
		fs.PrintDefaults()
	}
	g := &globals{m: m}
	p := m.pre
	fs.StringVar(&g.master, "master", p.master, "master gRPC address")
	fs.StringVar(&g.cluster, "cluster", p.cluster, "cluster.json written by willow up or deploy/local/up.sh")
	fs.BoolVar(&g.json, "json", p.json, "JSON output: one object per line for listings, one object for a single answer")
	fs.StringVar(&g.token, "token", p.token, "on-call token (default $WILLOW_ONCALL_TOKEN, or from --cluster)")
	fs.StringVar(&g.tlsCA, "tls-ca", p.tlsCA, "PEM CA bundle: talk gRPC over TLS, verifying servers with it")
	fs.StringVar(&g.tlsCert, "tls-cert", p.tlsCert, "PEM client certificate for mutual TLS (with --tls-key)")
	fs.StringVar(&g.tlsKey, "tls-key", p.tlsKey, "PEM private key of --tls-cert")
	return fs, g
}

// clientTLS returns the client TLS config the --tls-* flags describe, or
// nil for plaintext.
func (g *globals) clientTLS() (*tls.Config, error) {
	if g.tlsConfig != nil || (g.tlsCA == "" && g.tlsCert == "") {
		return g.tlsConfig, nil
	}
	_, cli, err := node.LoadTLS(g.tlsCert, g.tlsKey, g.tlsCA)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	g.tlsConfig = cli
	return cli, nil
}

// dial connects to a node, over TLS when the --tls-* flags say so, with
// the operator token (--token, $WILLOW_ONCALL_TOKEN or --cluster's
// oncall_token) as the credential of every call.
func (g *globals) dial(addr string) (*grpc.ClientConn, error) {
	t, err := g.clientTLS()
	if err != nil {
		return nil, err
	}
	return node.Dial(addr, t, grpc.WithPerRPCCredentials(auth.Bearer(g.oncallToken())))
}

// parse parses flags that may be interspersed with positional arguments
// and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// load reads --cluster when given.
func (g *globals) load() error {
	if g.cluster == "" || g.file != nil {
		return nil
	}
	f, err := cluster.LoadFile(g.cluster)
	if err != nil {
		return err
	}
	g.file = f
	return nil
}

// masterAddr returns the master address from --master or --cluster.
func (g *globals) masterAddr() (string, error) {
	if g.master != "" {
		return g.master, nil
	}
	if err := g.load(); err != nil {
		return "", err
	}
	if g.file != nil {
		return g.file.Master, nil
	}
	if env := g.m.Getenv("WILLOW_MASTER"); env != "" {
		return env, nil
	}
	return "", usagef("need --master ADDR or --cluster FILE")
}

// masterClient dials the master and returns its client and ctx bounded by
// masterCallTimeout; done cancels that and closes the connection.
func (g *globals) masterClient(ctx context.Context) (mc willowv1.MasterClient, callCtx context.Context, done func(), err error) {
	addr, err := g.masterAddr()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := g.dial(addr)
	if err != nil {
		return nil, nil, nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, masterCallTimeout)
	return willowv1.NewMasterClient(conn), callCtx, func() { cancel(); conn.Close() }, nil
}

// masterCallTimeout bounds a CLI command's calls to the master.
const masterCallTimeout = 10 * time.Second

// oncallToken returns the on-call token from --token, the environment or
// --cluster.
func (g *globals) oncallToken() string {
	if g.token != "" {
		return g.token
	}
	if t := g.m.Getenv("WILLOW_ONCALL_TOKEN"); t != "" {
		return t
	}
	if g.load() == nil && g.file != nil {
		return g.file.OncallToken
	}
	return ""
}

// uploadSecret returns the development upload-token secret from --cluster
// or $WILLOW_UPLOAD_SECRET.
func (g *globals) uploadSecret() string {
	if s := g.m.Getenv("WILLOW_UPLOAD_SECRET"); s != "" {
		return s
	}
	if g.load() == nil && g.file != nil {
		return g.file.UploadSecret
	}
	return ""
}
