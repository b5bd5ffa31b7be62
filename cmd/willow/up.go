package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"willow/cluster"
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
	fmt.Fprintf(m.Stdout, "\ntry:\n  willow upload --cluster %s PHOTO.jpg\n  curl -o medium.heic \"$(willow url --cluster %s ID --variant medium)\"\n  grpcurl -plaintext %s list\n  console: %s\n\nCtrl-C stops everything.\n",
		filepath.Join(abs, "cluster.json"), filepath.Join(abs, "cluster.json"), c.File.Master, c.File.Console)
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
