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

// Sections are the sections of the config file every service has: node:.
// A service's file type embeds them (yaml:",inline"), or StoreSections
// when it has an object store, next to its own section.
type Sections struct {
	Node NodeSection `yaml:"node"`
}

// StoreSections are Sections plus store:, for the services with an object
// store (upload, compress, edgecache).
type StoreSections struct {
	Node  NodeSection `yaml:"node"`
	Store StoreConfig `yaml:"store"`
}

func (s *Sections) sections() (*NodeSection, *StoreConfig)      { return &s.Node, nil }
func (s *StoreSections) sections() (*NodeSection, *StoreConfig) { return &s.Node, &s.Store }

// File is a service's config file type: a struct embedding Sections or
// StoreSections.
type File interface {
	sections() (*NodeSection, *StoreConfig)
}

// Binary is one service binary (Service): its role and how it runs. Main
// runs it in this process; tests run it with Run.
type Binary struct {
	role string
	run  func(ctx context.Context, p Process, args []string) error
}

// Run runs the binary with args in p until ctx is done; errors are the
// flags', the config file's, the service's constructor's and serving's.
func (b Binary) Run(ctx context.Context, p Process, args []string) error { return b.run(ctx, p, args) }

// Service is the binary of the service role, whose config file type is F:
// a run makes the Daemon (New), binds the service's own flags into a new
// F (flags, before any parsing), parses the arguments and -config (Parse,
// with F's node: and store: sections), then builds and serves the service
// (serve, which starts the node with Daemon.Start and ends with
// Daemon.Serve), and closes what the Daemon opened.
func Service[F any, P interface {
	*F
	File
}](role string, flags func(d *Daemon, f P), serve func(ctx context.Context, d *Daemon, f P) error) Binary {
	return Binary{role: role, run: func(ctx context.Context, p Process, args []string) error {
		d, f := New(role, p), P(new(F))
		flags(d, f)
		ns, st := f.sections()
		if err := d.Parse(args, f, ns, st); err != nil {
			return err
		}
		defer d.Close()
		return serve(ctx, d, f)
	}}
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
