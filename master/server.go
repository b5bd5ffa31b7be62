package master

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// Config configures a master. Zero values mean the documented default.
type Config struct {
	// OncallToken is required by SetFlex, RollbackFlex and SetDrill; empty
	// makes the console read-only and denies every change.
	OncallToken string
	// LevelsFile is a YAML file of level plans; empty uses the shipped plans.
	LevelsFile string
	// KeyPrefix prefixes every Redis key; default "willow:".
	KeyPrefix string
}

// Deps are the master's dependencies.
type Deps struct {
	// Node is the master's own node runtime (role "master"); required.
	Node *node.Node
	// Redis holds shared state for HA masters; required.
	Redis redis.UniversalClient
	// Now; default time.Now.
	Now func() time.Time
	// Logger; default the node's.
	Logger *slog.Logger
}

// Server implements willowv1.MasterServer.
type Server struct {
	willowv1.UnimplementedMasterServer
	cfg  Config
	node *node.Node
	rdb  redis.UniversalClient
	now  func() time.Time
	log  *slog.Logger

	flexState // flex.go
}

// New builds a master and registers its gRPC service on deps.Node.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Node == nil || deps.Redis == nil {
		return nil, errors.New("master: Node and Redis are required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "willow:"
	}
	s := &Server{cfg: cfg, node: deps.Node, rdb: deps.Redis, now: deps.Now, log: deps.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = deps.Node.Logger()
	}
	if err := s.initFlex(); err != nil {
		return nil, err
	}
	willowv1.RegisterMasterServer(deps.Node.Server(), s)
	return s, nil
}

// Run runs the master's background work (ejection, probes, flex expiry,
// sync with other masters) until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	go s.runFlex(ctx)
	<-ctx.Done()
	return nil
}
