package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/client"
	"willow/cluster"
	"willow/loadgen"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/token"
	"willow/urlsign"
)

// cmdLoad runs a load profile: willow load run PROFILE --report DIR.
func cmdLoad(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 || args[0] != "run" {
		return usagef("usage: willow load run PROFILE --report DIR (--master ADDR | --cluster FILE | --embedded) [--time-scale F] [--compare] [--auto-flex [--scripted PROFILE]]")
	}
	fs, g := m.newFlags("load run")
	report := fs.String("report", "", "report directory (required)")
	embedded := fs.Bool("embedded", false, "run against a fresh one-box cluster started in process")
	scale := fs.Float64("time-scale", 1, "multiply every phase duration and action time by F")
	compare := fs.Bool("compare", false, "run twice, flex off and flex on, and compare")
	region := fs.String("region", "a", "the load's client region")
	maxOut := fs.Int("max-outstanding", loadgen.DefaultMaxOutstanding, "requests in flight before arrivals are dropped by the generator")
	autoFlex := fs.Bool("auto-flex", false, "run with auto-flex on (the master steps the level from live signals); with --compare, against --scripted")
	scripted := fs.String("scripted", "", "with --auto-flex --compare: the scripted profile to compare with (default PROFILE without -unscripted)")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 || *report == "" {
		return usagef("need one PROFILE and --report DIR")
	}
	if *scale <= 0 {
		return usagef("--time-scale must be > 0")
	}
	prof, err := loadgen.LoadProfile(pos[0])
	if err != nil {
		return err
	}
	prof = prof.Scaled(*scale)
	if !*embedded {
		if _, err := g.masterAddr(); err != nil {
			return err
		}
	}
	var steps []autoFlexStep // the auto-flex run's level steps (load_auto.go)
	runProfile := func(prof *loadgen.Profile, flexOff, auto bool) (*loadgen.Report, error) {
		mode := "flex-on"
		switch {
		case auto:
			mode = "auto-flex"
		case flexOff:
			mode = "flex-off"
		}
		tgt, closeTgt, err := loadTarget(ctx, m, g, *embedded, filepath.Join(*report, "cluster-"+mode), *region)
		if err != nil {
			return nil, err
		}
		defer closeTgt()
		fmt.Fprintf(m.Stderr, "willow load: %s (%s), %s\n", prof.Name, mode, prof.Total())
		var restore func() ([]autoFlexStep, error)
		if auto {
			if restore, err = startAutoFlex(ctx, tgt.Master); err != nil {
				return nil, err
			}
		}
		rep, err := loadgen.Run(ctx, loadgen.RunConfig{
			Profile: prof, Target: tgt, FlexOff: flexOff, Mode: mode,
			Progress: m.Stderr, TTY: isTerminal(m.Stderr), MaxOutstanding: *maxOut,
		})
		if restore != nil {
			s, rerr := restore()
			if err == nil && rerr != nil {
				err = rerr
			}
			steps = s
		}
		return rep, err
	}
	runOne := func(flexOff bool) (*loadgen.Report, error) { return runProfile(prof, flexOff, *autoFlex) }
	if *compare && *autoFlex {
		sp, err := scriptedProfile(pos[0], *scripted, *scale)
		if err != nil {
			return err
		}
		base, err := runProfile(sp, false, false)
		if err != nil {
			return err
		}
		auto, err := runProfile(prof, false, true)
		if err != nil {
			return err
		}
		return writeAutoComparison(m.Stdout, *report, base, auto, steps)
	}
	if *compare {
		off, err := runOne(true)
		if err != nil {
			return err
		}
		on, err := runOne(false)
		if err != nil {
			return err
		}
		if err := loadgen.WriteComparison(*report, loadgen.Comparison{Off: off, On: on}); err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "{\"report\":%q,\"flex_off\":{\"goodput_per_s\":%.2f,\"lost\":%d},\"flex_on\":{\"goodput_per_s\":%.2f,\"lost\":%d}}\n",
			filepath.Join(*report, "report.md"), off.Totals.GoodputPerS, off.Totals.Lost, on.Totals.GoodputPerS, on.Totals.Lost)
		return lostError(off, on)
	}
	rep, err := runOne(false)
	if err != nil {
		return err
	}
	if err := rep.Write(*report); err != nil {
		return err
	}
	if *autoFlex {
		return writeAutoResult(m.Stdout, *report, rep, steps)
	}
	fmt.Fprintf(m.Stdout, "{\"report\":%q,\"goodput_per_s\":%.2f,\"uploads_ok\":%d,\"lost\":%d}\n",
		filepath.Join(*report, "report.md"), rep.Totals.GoodputPerS, rep.Totals.Upload.Succeeded, rep.Totals.Lost)
	return lostError(rep)
}

func lostError(reps ...*loadgen.Report) error {
	for _, r := range reps {
		if r.Totals.Lost > 0 {
			return fmt.Errorf("%d acknowledged uploads lost in the %s run", r.Totals.Lost, r.Mode)
		}
	}
	return nil
}

// loadTarget connects to the cluster named by the flags, or starts an
// embedded one-box cluster in dir.
func loadTarget(ctx context.Context, m *Main, g *globals, embedded bool, dir, region string) (loadgen.Target, func(), error) {
	masterAddr, oncall, secret := "", "", ""
	var urlKeys []urlsign.Key
	closeFn := func() {}
	if embedded {
		logf, err := openLog(dir)
		if err != nil {
			return loadgen.Target{}, nil, err
		}
		c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Logger: slog.New(slog.NewJSONHandler(logf, nil))})
		if err != nil {
			logf.Close()
			return loadgen.Target{}, nil, err
		}
		closeFn = func() { c.Close(); logf.Close() }
		masterAddr, oncall, secret, urlKeys = c.File.Master, c.File.OncallToken, c.File.UploadSecret, c.File.URLKeys
	} else {
		var err error
		if masterAddr, err = g.masterAddr(); err != nil {
			return loadgen.Target{}, nil, err
		}
		oncall, secret = g.oncallToken(), g.uploadSecret()
		if g.file != nil {
			urlKeys = g.file.URLKeys
		}
		if secret == "" {
			return loadgen.Target{}, nil, usagef("uploads need the cluster's upload secret: --cluster FILE or WILLOW_UPLOAD_SECRET")
		}
	}
	t, err := g.clientTLS()
	if err != nil {
		closeFn()
		return loadgen.Target{}, nil, err
	}
	router, err := client.NewRouter(client.RouterConfig{MasterAddr: masterAddr, Region: region, TLS: t})
	if err != nil {
		closeFn()
		return loadgen.Target{}, nil, err
	}
	// Flex actions and node listings are an operator's calls.
	mconn, err := node.Dial(masterAddr, t, grpc.WithPerRPCCredentials(auth.Bearer(oncall)))
	if err != nil {
		closeFn()
		return loadgen.Target{}, nil, err
	}
	cl := &client.Client{Router: router, CallTimeout: time.Minute, Token: func(u, b string) (string, error) {
		return token.Sign([]byte(secret), u, b, time.Now().Add(time.Hour))
	}}
	if len(urlKeys) > 0 {
		if cl.URLKeys, err = urlsign.New(urlKeys); err != nil {
			closeFn()
			return loadgen.Target{}, nil, err
		}
	}
	// Buffer status and timeline stats too: pooled connections carrying
	// the operator token.
	ops, err := client.NewRouter(client.RouterConfig{MasterAddr: masterAddr, Region: region, TLS: t, Credentials: auth.Bearer(oncall)})
	if err != nil {
		closeFn()
		return loadgen.Target{}, nil, err
	}
	tgt := loadgen.Target{Client: cl, Master: willowv1.NewMasterClient(mconn), OncallToken: oncall, Conn: ops.Conn}
	return tgt, func() { router.Close(); ops.Close(); mconn.Close(); closeFn() }, nil
}

// isTerminal reports whether w is a terminal (character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
