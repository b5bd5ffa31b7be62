package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/buffer"
	"willow/client"
	"willow/compress"
	"willow/edgecache"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/store"
	"willow/store/fs"
	"willow/timeline"
	"willow/upload"
)

// Config configures a one-box cluster. Zero values mean the default.
type Config struct {
	// Dir holds everything: the directory store, buffer pools, staging,
	// Redis data, cluster.json. Required.
	Dir string
	// RedisURL, when set, uses that Redis instead of starting redis-server.
	RedisURL string
	// Regions; default a and b.
	Regions []string
	// OncallToken and UploadSecret; default: kept from an existing
	// DIR/cluster.json, else random.
	OncallToken  string
	UploadSecret string
	// Store, when set, replaces the directory store (tests use S3).
	Store store.Store
	// HeartbeatInterval for every node; default node.DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Cluster is a running one-box cluster.
type Cluster struct {
	File   File
	Master *master.Server
	Redis  redis.UniversalClient

	cfg     Config
	redisP  *RedisProc
	runCtx  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errMu   sync.Mutex    // guards err
	err     error         // the first error a component stopped with
	failed  chan struct{} // closed when err is set
	closers []func()
	nodes   []*node.Node
}

// newNode builds a node with the shared shedding interceptors installed.
// nodeLoad are the role-specific load figures a node reports.
type nodeLoad struct {
	gauges  func() map[string]float64
	queueMs func() float64
}

func (c *Cluster) newNode(id, role, region, masterAddr string, load nodeLoad) (*node.Node, error) {
	cfg := node.Config{
		ID: id, Role: role, Region: region, MasterAddr: masterAddr,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		Logger:            c.cfg.Logger,
		Gauges:            load.gauges,
		QueueMs:           load.queueMs,
	}
	if role != "master" {
		sc := shedding.ServiceConfig()
		cfg.Shed = &sc
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// run starts f in the background until Close.
func (c *Cluster) run(f func(context.Context) error) {
	ctx := c.runCtx
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := f(ctx); err != nil {
			c.errMu.Lock()
			if c.err == nil {
				c.err = err
				close(c.failed)
			}
			c.errMu.Unlock()
		}
	}()
}

// waitReady waits until the master lists every node as healthy.
func (c *Cluster) waitReady(ctx context.Context, masterAddr string) error {
	conn, err := node.Dial(masterAddr, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	want := len(c.nodes) - 1 // all but the master
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := mc.ListNodes(cctx, &willowv1.ListNodesRequest{})
		cancel()
		if err == nil {
			healthy := 0
			for _, ns := range resp.GetNodes() {
				if ns.GetState() == "healthy" {
					healthy++
				}
			}
			if healthy >= want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: nodes not all healthy after 30s (last: %v)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Failed is closed when a component stops with an error; Err says which.
func (c *Cluster) Failed() <-chan struct{} { return c.failed }

// Err returns the first error a component stopped with, if any.
func (c *Cluster) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close stops every node (gracefully), the Redis child and closes files.
func (c *Cluster) Close() {
	c.cancel()
	c.wg.Wait()
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
	if c.redisP != nil {
		c.redisP.Stop()
		c.redisP = nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
