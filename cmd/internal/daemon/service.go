package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Binary is one service binary (Service): its role and how it runs. Main
// runs it in this process; tests run it with Run.
type Binary struct {
	role string
	run  func(ctx context.Context, p Process, args []string) error
	doc  func() any
}

// Run runs the binary with args in p until ctx is done; errors are the
// flags', the config file's, the service's constructor's and serving's.
func (b Binary) Run(ctx context.Context, p Process, args []string) error { return b.run(ctx, p, args) }

// Role is the binary's role, the name of its own config file section.
func (b Binary) Role() string { return b.role }

// ConfigDoc returns a new, empty document of the binary's config file:
// what -config is decoded into (a pointer to a struct with one field per
// section, File.doc), for tests of the file format.
func (b Binary) ConfigDoc() any { return b.doc() }

// Service is the binary of the service role, whose config file is
// File[S] with the shared sections has names: a run makes the Daemon
// (New), binds flags to keys of the service's section S and the shared
// sections' flags to theirs, parses the arguments and -config (Parse),
// then builds and serves the service (serve, which starts the node with
// Daemon.Start and ends with Daemon.Serve), and closes what the Daemon
// opened. A flag naming a key S lacks is an error.
func Service[S any](role string, has Has, flags []Flag, serve func(ctx context.Context, d *Daemon, f *File[S]) error) Binary {
	run := func(ctx context.Context, p Process, args []string) error {
		d, f := New(role, p), new(File[S])
		if err := d.bind(role, flags, &f.Service); err != nil {
			return err
		}
		var st *StoreConfig
		if has&Store != 0 {
			st = &f.Store
		}
		if err := d.Parse(args, f.doc(role, has), &f.Node, st); err != nil {
			return err
		}
		defer d.Close()
		return serve(ctx, d, f)
	}
	return Binary{role: role, run: run, doc: func() any { return new(File[S]).doc(role, has) }}
}

// Main runs b in this process (its stderr and environment) with a
// context cancelled on SIGINT or SIGTERM and exits: 0 on success or -h, 1
// with "role: error" on stderr otherwise.
func Main(b Binary) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := b.Run(ctx, Process{Stderr: os.Stderr, Getenv: os.Getenv}, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, b.role+":", err)
		os.Exit(1)
	}
}
