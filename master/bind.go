package master

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

// A registered node ID is bound to the credential that registered it: the
// key bind:ID holds that credential's fingerprint (auth.Caller.Credential
// and Instance) and lives MissedAfter, renewed by every heartbeat from the
// same credential. While it lives nobody else can register or heartbeat
// that ID; once the node has been silent for MissedAfter (it died) a new
// process may take the ID over (a restart).

func (s *Server) bindKey(id string) string { return s.key("bind:" + id) }

// nodeCaller checks that the call in ctx comes from the node info names:
// a node caller whose authenticated ID and role are info's. It returns
// the credential fingerprint to bind ("" without a Caller: an Open guard).
func nodeCaller(ctx context.Context, info *willowv1.NodeInfo) (string, error) {
	c, ok := auth.FromContext(ctx)
	if !ok {
		return "", nil
	}
	if c.Class != auth.Node {
		return "", rpcstatus.New(codes.PermissionDenied, auth.ReasonWrongClass, "%s is not a node", c)
	}
	if c.NodeID != info.GetId() || c.NodeRole != info.GetRole() {
		return "", rpcstatus.New(codes.PermissionDenied, auth.ReasonNodeIdentity,
			"credential of %s node %q cannot act as %s node %q", c.NodeRole, c.NodeID, info.GetRole(), info.GetId())
	}
	return c.Credential + "/" + c.Instance, nil
}

// bind binds id to fp, or renews the binding; it refuses when another
// live credential holds id. With renewOnly (heartbeats) a missing binding
// reports missing instead of taking it.
func (s *Server) bind(ctx context.Context, id, fp string, renewOnly bool) (missing bool, err error) {
	if fp == "" {
		return false, nil
	}
	key, ttl := s.bindKey(id), s.cfg.MissedAfter
	if !renewOnly {
		ok, err := s.rdb.SetNX(ctx, key, fp, ttl).Result()
		if err != nil {
			return false, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "bind %s: %v", id, err)
		}
		if ok {
			return false, nil
		}
	}
	cur, err := s.rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return true, nil
	case err != nil:
		return false, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "bind %s: %v", id, err)
	case cur != fp:
		return false, rpcstatus.New(codes.PermissionDenied, ReasonNodeIDTaken,
			"node %s is registered and alive with another credential", id)
	}
	if err := s.rdb.PExpire(ctx, key, ttl).Err(); err != nil {
		return false, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "bind %s: %v", id, err)
	}
	return false, nil
}
