// Command compress runs one Willow compress worker (compress.Server on a
// node), registered with the master, taking codec knobs from it.
//
//	compress -config compress.yaml
//	compress -id compress-a-1 -region a -grpc :7100 -admin :7101 -master 127.0.0.1:7000 -store /var/lib/willow/store
//	compress -id compress-a-1 -region a -master M -s3-endpoint host:9000 -s3-bucket willow -s3-access-key K -s3-secret-key S
//
// The config file has three sections, node: (the runtime), compress:
// (compress.Config plus the store) and limits: (limits.Limits, the same
// section the upload fronts read); flags override it. It runs until
// SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"willow/cmd/internal/daemon"
	"willow/compress"
	"willow/limits"
	"willow/node"
)

func main() { daemon.Main("compress", NewMain().Run) }

// Main runs a compress worker; tests run it in process.
type Main struct {
	Stderr io.Writer
	// Ready, when set, is called with the listening node once it serves.
	Ready func(n *node.Node)
}

// NewMain returns a Main writing logs to stderr.
func NewMain() *Main { return &Main{Stderr: os.Stderr} }

// FileConfig is the YAML config file.
type FileConfig struct {
	Node daemon.NodeConfig `yaml:"node"`
	// Limits are the media limits, the same section as the upload
	// front's config.
	Limits   limits.Limits `yaml:"limits"`
	Compress struct {
		Workers      int             `yaml:"workers"`
		QueueLen     int             `yaml:"queue_len"`
		TaskTimeout  time.Duration   `yaml:"task_timeout"`
		TempDir      string          `yaml:"temp_dir"`
		HEICPreset   string          `yaml:"heic_preset"`
		X264Preset   string          `yaml:"x264_preset"`
		FFmpeg       string          `yaml:"ffmpeg"`
		FFprobe      string          `yaml:"ffprobe"`
		RetryAfter   time.Duration   `yaml:"retry_after"`
		StoreTimeout time.Duration   `yaml:"store_timeout"`
		Store        string          `yaml:"store"` // directory store
		S3           daemon.S3Config `yaml:"s3"`
	} `yaml:"compress"`
}

// Run parses args, starts the worker and serves until ctx is done.
func (m *Main) Run(ctx context.Context, args []string) error {
	f := daemon.NewFlags("compress", m.Stderr, true)
	workers := f.FS.Int("workers", 0, "concurrent tasks (default: cores)")
	queueLen := f.FS.Int("queue", 0, fmt.Sprintf("tasks waiting for a worker (default %d)", compress.DefaultQueueLen))
	var fc FileConfig
	nc, cc := &fc.Node, &fc.Compress
	if err := f.Parse(args, &fc, nc, &cc.Store, &cc.S3); err != nil {
		return err
	}
	if *workers != 0 {
		cc.Workers = *workers
	}
	if *queueLen != 0 {
		cc.QueueLen = *queueLen
	}
	if nc.Region == "" {
		return errors.New("need -region (or node.region in the config)")
	}
	if nc.ID == "" {
		nc.ID = "compress-" + nc.Region + "-1"
	}
	st, err := daemon.OpenStore(cc.Store, cc.S3)
	if err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(m.Stderr, nil))
	var srv *compress.Server
	ncfg, err := f.NodeConfig("compress", *nc, log)
	if err != nil {
		return err
	}
	ncfg.QueueMs = func() float64 {
		if srv == nil {
			return 0
		}
		return srv.QueueMs()
	}
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	srv, err = compress.New(compress.Config{
		Workers: cc.Workers, QueueLen: cc.QueueLen, TaskTimeout: cc.TaskTimeout, Limits: fc.Limits,
		TempDir:    cc.TempDir,
		HEICPreset: cc.HEICPreset, X264Preset: cc.X264Preset, FFmpeg: cc.FFmpeg, FFprobe: cc.FFprobe,
		RetryAfter: cc.RetryAfter, StoreTimeout: cc.StoreTimeout, Logger: log,
	}, compress.Deps{Node: n, Store: st})
	if err != nil {
		return err
	}
	return daemon.Serve(ctx, n, func() {
		if m.Ready != nil {
			m.Ready(n)
		}
	}, srv.Run)
}
