package master

import (
	"context"
	"fmt"
	"sort"
	"time"

	"willow/auth"
	"willow/redisconn"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// Drill kinds.
const (
	DrillLatency = "latency"
	DrillErrors  = "errors"
	DrillSilence = "silence"
)

func (s *Server) drillsKey() string { return s.key("drills") }

// loadDrills reads the drills from Redis.
func (s *Server) loadDrills(ctx context.Context) ([]*willowv1.Drill, error) {
	m, err := s.rdb.HGetAll(ctx, s.drillsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("master: load drills: %w", err)
	}
	out := make([]*willowv1.Drill, 0, len(m))
	for id, b := range m {
		d := &willowv1.Drill{}
		if err := proto.Unmarshal([]byte(b), d); err != nil {
			s.log.Warn("bad drill", "id", id, "err", err)
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out, nil
}

// drillID names the drill of kind on node id; a node has at most one
// drill of each kind.
func drillID(id, kind string) string { return id + "-" + kind }

// drillList is the drills of the last load and this master's changes.
func (s *Server) drillList() []*willowv1.Drill {
	if p := s.drills.Load(); p != nil {
		return *p
	}
	return nil
}

// drillsFor returns the unexpired drills for the node with id or addr
// (either may be empty). Heartbeat responses and Watch events carry them.
func (s *Server) drillsFor(id, addr string, now time.Time) []*willowv1.Drill {
	var out []*willowv1.Drill
	for _, d := range s.drillList() {
		if d.GetExpiresAtUnixMs() <= now.UnixMilli() {
			continue
		}
		if d.GetNodeAddr() == addr || d.GetId() == drillID(id, d.GetKind()) {
			out = append(out, d)
		}
	}
	return out
}

// cleanDrills deletes expired drills from Redis (leader only).
func (s *Server) cleanDrills(ctx context.Context, now time.Time) error {
	var old []string
	for _, d := range s.drillList() {
		if d.GetExpiresAtUnixMs() <= now.UnixMilli() {
			old = append(old, d.GetId())
		}
	}
	if len(old) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.rdb.HDel(ctx, s.drillsKey(), old...).Err()
}

// SetDrill orders a fault drill on one node (addressed by its gRPC address
// or node ID): extra latency, a fraction of failed requests, or silenced
// heartbeats, for for_ms. A new drill replaces the node's drill of the same
// kind; for_ms of 0 with an existing kind ends it now. The node receives
// it with its next heartbeat. Every attempt is audited. Errors:
// UNAUTHENTICATED or PERMISSION_DENIED (see operator: an on-call operator only), INVALID_ARGUMENT (kind, for, latency,
// error_ratio), NOT_FOUND (node), UNAVAILABLE (redis).
func (s *Server) SetDrill(ctx context.Context, req *willowv1.SetDrillRequest) (resp *willowv1.SetDrillResponse, err error) {
	now := s.now()
	d := &willowv1.Drill{}
	if req.GetDrill() != nil {
		d = proto.Clone(req.GetDrill()).(*willowv1.Drill)
	}
	defer func() {
		e := &willowv1.AuditEntry{
			AtUnixMs: now.UnixMilli(), Actor: d.GetActor(), Action: "drill",
			Scope: "node:" + d.GetNodeAddr(), To: drillSummary(d, req.GetForMs()),
			Reason: d.GetReason(), Accepted: err == nil,
		}
		if err != nil {
			e.Error = rpcstatus.Line(err)
		}
		s.audit(e)
	}()
	c, err := s.operator(ctx, req.GetToken(), auth.RoleOncall)
	d.Actor = actorOf(c) // the authenticated name, never the request's
	if err != nil {
		return nil, err
	}
	dur := time.Duration(req.GetForMs()) * time.Millisecond
	if dur < 0 || dur > s.cfg.MaxDrill {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonDrillFor, "drill duration %v: want 0 (end it) to %v", dur, s.cfg.MaxDrill)
	}
	switch d.GetKind() {
	case DrillLatency:
		if d.GetLatencyMs() <= 0 && dur > 0 {
			return nil, rpcstatus.New(codes.InvalidArgument, ReasonDrillLatency, "latency drill needs latency_ms > 0")
		}
	case DrillErrors:
		if r := d.GetErrorRatio(); (r <= 0 || r > 1) && dur > 0 {
			return nil, rpcstatus.New(codes.InvalidArgument, ReasonDrillErrorRatio, "errors drill needs 0 < error_ratio <= 1, got %v", r)
		}
	case DrillSilence:
	default:
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonDrillKind, "drill kind %q: want latency, errors or silence", d.GetKind())
	}
	v, err := s.refresh(ctx)
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "drill: %v", err)
	}
	var target *entry
	for _, e := range v.entries {
		if e.info.GetAddr() == d.GetNodeAddr() || e.info.GetId() == d.GetNodeAddr() {
			target = e
			break
		}
	}
	if target == nil {
		return nil, rpcstatus.New(codes.NotFound, ReasonNode, "no node %q in the registry", d.GetNodeAddr())
	}
	if target.info.GetRole() == "master" {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonNode, "drills do not apply to masters")
	}
	d.NodeAddr = target.info.GetAddr()
	d.ExpiresAtUnixMs = now.Add(dur).UnixMilli()
	d.Id = drillID(target.info.GetId(), d.GetKind())
	b, err := proto.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("master: encode drill: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if dur == 0 {
		err = s.rdb.HDel(wctx, s.drillsKey(), d.GetId()).Err()
	} else {
		err = s.rdb.HSet(wctx, s.drillsKey(), d.GetId(), b).Err()
	}
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "drill: %v", err)
	}
	s.mu.Lock()
	cur := s.drillList()
	kept := cur[:0:0]
	for _, o := range cur {
		if o.GetId() != d.GetId() {
			kept = append(kept, o)
		}
	}
	if dur > 0 {
		kept = append(kept, d)
	}
	s.drills.Store(&kept)
	s.mu.Unlock()
	s.log.Info("drill", "node", d.GetNodeAddr(), "kind", d.GetKind(), "for", dur, "actor", d.GetActor(), "reason", d.GetReason())
	return &willowv1.SetDrillResponse{Drill: d}, nil
}

func drillSummary(d *willowv1.Drill, forMs int64) string {
	dur := time.Duration(forMs) * time.Millisecond
	switch {
	case forMs == 0:
		return d.GetKind() + " off"
	case d.GetKind() == DrillLatency:
		return fmt.Sprintf("latency %dms for %v", d.GetLatencyMs(), dur)
	case d.GetKind() == DrillErrors:
		return fmt.Sprintf("errors %.2f for %v", d.GetErrorRatio(), dur)
	}
	return fmt.Sprintf("%s for %v", d.GetKind(), dur)
}

// ListDrills lists the active drills (read from Redis, the cache when
// Redis does not answer).
func (s *Server) ListDrills(ctx context.Context, _ *willowv1.ListDrillsRequest) (*willowv1.ListDrillsResponse, error) {
	if _, err := s.refresh(ctx); err != nil {
		s.log.Warn("list drills: using cache", "err", err)
	}
	now := s.now().UnixMilli()
	resp := &willowv1.ListDrillsResponse{}
	for _, d := range s.drillList() {
		if d.GetExpiresAtUnixMs() > now {
			resp.Drills = append(resp.Drills, d)
		}
	}
	return resp, nil
}
