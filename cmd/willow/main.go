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
	"sort"
	"strings"
	"syscall"

	"willow/auth"
	"willow/cluster"
	"willow/node"
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
}

// NewMain returns a Main on the process's stdio.
func NewMain() *Main { return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

type command struct {
	run   func(ctx context.Context, m *Main, args []string) error
	usage string
}

func commands() map[string]command {
	return map[string]command{
		"up":       {cmdUp, "up [--dir DIR] [--redis URL]: run the one-box cluster"},
		"upload":   {cmdUpload, "upload [--upload-id ID] [--user U] [--business B] FILE...: upload media"},
		"download": {cmdDownload, "download ID|SIGNED_URL [--variant V] -o FILE: download a variant"},
		"url":      {cmdURL, "url ID [--variant V] [--for D] [--edge ADDR] [--user U]: print a signed download URL"},
		"token":    {cmdToken, "token --user U --business B: print an upload token"},
		"nodes":    {cmdNodes, "nodes [--json]: list nodes and their state"},
		"flex":     {cmdFlex, "flex status|set LEVEL|knob NAME=VALUE...|history|rollback: on-call flex control"},
		"buffer":   {cmdBuffer, "buffer status|drain --pool N: buffer pools"},
		"media":    {cmdMedia, "media status ID [--json] | retry ID: a media item's state (processing, ready, failed) and operator retry"},
		"timeline": {cmdTimeline, "timeline follow|publish|poll: timeline"},
		"load":     {cmdLoad, "load run PROFILE --report DIR: replay a load profile"},
		"capacity": {cmdCapacity, "capacity plan --calibration report.json --growth uploads=9: capacity review"},
		"drill":    {cmdDrill, "drill latency|errors|silence --node ADDR --for DURATION: fault drills"},
	}
}

// Run runs one command and returns the exit status.
func (m *Main) Run(ctx context.Context, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		m.usage(cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(m.Stderr, "willow: unknown command %q\n", args[0])
		m.usage(cmds)
		return 2
	}
	if err := c.run(ctx, m, args[1:]); err != nil {
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

func (m *Main) usage(cmds map[string]command) {
	fmt.Fprintln(m.Stderr, "usage: willow COMMAND [flags] [args]")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(m.Stderr, "  %s\n", cmds[n].usage)
	}
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

}

// newFlags returns a flag set with the shared flags --master, --cluster,
// --json and --token registered.
func (m *Main) newFlags(name string) (*flag.FlagSet, *globals) {
	fs := flag.NewFlagSet("willow "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	g := &globals{m: m}
	fs.StringVar(&g.master, "master", "", "master gRPC address")
	fs.StringVar(&g.cluster, "cluster", "", "cluster.json written by willow up or deploy/local/up.sh")
	fs.BoolVar(&g.json, "json", false, "JSON output")
	fs.StringVar(&g.token, "token", "", "on-call token (default $WILLOW_ONCALL_TOKEN, or from --cluster)")
	fs.StringVar(&g.tlsCA, "tls-ca", "", "PEM CA bundle: talk gRPC over TLS, verifying servers with it")
	fs.StringVar(&g.tlsCert, "tls-cert", "", "PEM client certificate for mutual TLS (with --tls-key)")
	fs.StringVar(&g.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
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

// dialMaster connects to the master.
func (g *globals) dialMaster() (*grpc.ClientConn, error) {
	addr, err := g.masterAddr()
	if err != nil {
		return nil, err
	}
	return g.dial(addr)
}

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
