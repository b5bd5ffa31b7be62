package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"willow/cluster"
	"willow/flex"
)

// cmdUp runs the one-box cluster until interrupted.
func cmdUp(ctx context.Context, m *Main, args []string) error {
	fs, _ := m.newFlags("up")
	dir := fs.String("dir", "./run", "directory for the store, pools, Redis data and cluster.json")
	redisURL := fs.String("redis", "", "use this Redis instead of starting redis-server: redis://host:port/db or redis-cluster://h1:port,h2:port,...")
	verbose := fs.Bool("v", false, "debug logs")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logf, err := openLog(abs)
	if err != nil {
		return err
	}
	defer logf.Close()
	logger := slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: level}))
	c, err := cluster.Start(ctx, cluster.Config{Dir: abs, RedisURL: *redisURL, Logger: logger})
	if err != nil {
		return err
	}
	defer c.Close()
	b, _ := json.MarshalIndent(c.File, "", "  ")
	fmt.Fprintf(m.Stdout, "willow: one-box cluster up (logs: %s)\n%s\n", logf.Name(), b)
	// The codec the compress workers encode with now (the flex knob
	// image_codec: HEIC at level normal).
	codec := flex.DefaultImageCodec
	if n := c.Node("compress-a-1"); n != nil {
		codec = n.Knobs().ImageCodec
	}
	fmt.Fprintf(m.Stdout, "\n%s\nCtrl-C stops everything.\n", upBanner(filepath.Join(abs, "cluster.json"), c.File, codec))
	select {
	case <-ctx.Done():
		fmt.Fprintln(m.Stdout, "willow: stopping")
		return nil
	case <-c.Failed():
		fmt.Fprintln(m.Stdout, "willow: a component failed; stopping")
		return c.Err()
	}
}

func openLog(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "willow.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// upBanner is what `willow up` suggests trying: commands that work as
// printed in a shell with jq (the media ID goes through $ID), with the
// file extension of the bytes each one gets under image codec codec.
// Variants are stored in codec; an edge answers clients whose Accept does
// not name image/heic (curl's */*, browsers) with a JPEG made from a HEIC.
func upBanner(cf string, f cluster.File, codec flex.ImageCodec) string {
	q := shellQuote(cf)
	var b strings.Builder
	fmt.Fprintf(&b, "try (PHOTO.jpg: a photo of yours; image variants are stored as %s):\n", strings.ToUpper(string(codec)))
	fmt.Fprintf(&b, "  ID=$(willow upload --cluster %s PHOTO.jpg | jq -r .id)\n", q)
	fmt.Fprintf(&b, "  willow media status --cluster %s \"$ID\"    # variants are ready a few seconds after the upload\n", q)
	fmt.Fprintf(&b, "  curl -fo medium.jpg \"$(willow url --cluster %s \"$ID\" --variant medium)\"\n", q)
	if codec == flex.CodecHEIC {
		fmt.Fprintf(&b, "  curl -fo medium.heic -H 'Accept: image/heic' \"$(willow url --cluster %s \"$ID\" --variant medium)\"\n", q)
	}
	fmt.Fprintf(&b, "  willow download --cluster %s \"$ID\" --variant thumb -o thumb.%s\n", q, codecExt(codec))
	fmt.Fprintf(&b, "  grpcurl -plaintext %s list\n", f.Master)
	fmt.Fprintf(&b, "  console: %s (token: jq -r .oncall_token %s)\n", f.Console, q)
	return b.String()
}

// codecExt is the file extension of an image variant stored in codec.
func codecExt(codec flex.ImageCodec) string {
	if codec == flex.CodecJPEG {
		return "jpg"
	}
	return string(codec)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == ':' || r == '+' || r == ',' || r == '=' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
