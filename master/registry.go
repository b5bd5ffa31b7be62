package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

// Node states as ListNodes and `willow nodes` show them.
const (
	StateHealthy = "healthy"
	StateEjected = "ejected"
	StateProbing = "probing"
)

// validID reports whether id is a node ID: [a-z0-9][a-z0-9-]* (checked by
// hand: every heartbeat checks it, and a regexp was a cost of its own).
func validID(id string) bool {
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return false
		}
	}
	return id != ""
}

// sample is one heartbeat's request counts.
type sample struct {
	At  int64 `json:"at"` // unix ms
	Req int64 `json:"req"`
	Err int64 `json:"err"`
}

// record is a node's registry entry in Redis (key node:ID, with TTL), in
// the binary form of record.go.
type record struct {
	Info    []byte   `json:"info"` // proto NodeInfo
	Load    []byte   `json:"load"` // proto Load of the last heartbeat
	LastMs  int64    `json:"last_ms"`
	Samples []sample `json:"samples"` // heartbeats within the success window
}

// health is a node's health judgement in Redis (key health:ID), written
// by the leading master (and created by Register).
type health struct {
	State          string `json:"state"`
	SinceMs        int64  `json:"since_ms"`
	Reason         string `json:"reason,omitempty"`
	Strikes        int    `json:"strikes,omitempty"` // ejections in a row, each after a recovery within FlapMemory
	ProtectUntilMs int64  `json:"protect_until_ms,omitempty"`
	ProbeOK        int    `json:"probe_ok,omitempty"`
	ProbeFail      int    `json:"probe_fail,omitempty"`
	RecoveredMs    int64  `json:"recovered_ms,omitempty"`
}

// entry is one node as loaded from Redis.
type entry struct {
	info    *willowv1.NodeInfo
	load    *willowv1.Load
	lastMs  int64
	samples []sample
	h       health
}

// view is a snapshot of the shared registry.
type view struct {
	at      time.Time
	gen     uint64 // the load it came from: a later load has a larger gen
	members uint64 // regState.members when loaded: the same nodes as another view with it
	entries []*entry
}

// alive reports whether e heartbeated within missedAfter of now.
func (e *entry) alive(now time.Time, missedAfter time.Duration) bool {
	return now.UnixMilli()-e.lastMs < missedAfter.Milliseconds()
}

// state is the state a node is shown in: a node without recent heartbeats
// is ejected whatever the stored judgement says.
func (e *entry) state(now time.Time, missedAfter time.Duration) (state string, sinceMs int64, reason string) {
	if !e.alive(now, missedAfter) && e.h.State != StateEjected {
		return StateEjected, e.lastMs + missedAfter.Milliseconds(), ReasonMissedHeartbeats
	}
	if e.h.State == "" {
		return StateHealthy, e.lastMs, ""
	}
	return e.h.State, e.h.SinceMs, e.h.Reason
}

// window sums the samples newer than fromMs.
func window(samples []sample, fromMs int64) (req, errs int64) {
	for _, s := range samples {
		if s.At > fromMs {
			req += s.Req
			errs += s.Err
		}
	}
	return req, errs
}

func (s *Server) nodeKey(id string) string   { return s.key("node:" + id) }
func (s *Server) healthKey(id string) string { return s.key("health:" + id) }
func (s *Server) healthTTL() time.Duration {
	return 2 * max(s.cfg.EntryTTL, s.cfg.FlapMemory, s.cfg.MaxProtection)
}

func validInfo(n *willowv1.NodeInfo) error {
	switch {
	case n == nil:
		return rpcstatus.New(codes.InvalidArgument, ReasonNode, "node info missing")
	case !validID(n.GetId()):
		return rpcstatus.New(codes.InvalidArgument, ReasonNodeID, "node id %q: want [a-z0-9-]", n.GetId())
	case n.GetRole() == "":
		return rpcstatus.New(codes.InvalidArgument, ReasonRole, "node %s: role missing", n.GetId())
	case n.GetRegion() == "":
		return rpcstatus.New(codes.InvalidArgument, ReasonRegion, "node %s: region missing", n.GetId())
	case n.GetAddr() == "":
		return rpcstatus.New(codes.InvalidArgument, ReasonAddr, "node %s: addr missing", n.GetId())
	case node.Unspecified(n.GetAddr()) || (n.GetHttpAddr() != "" && node.Unspecified(n.GetHttpAddr())):
		// Handing 0.0.0.0 or [::] to clients and peers would send them to
		// themselves: the node must advertise a reachable address.
		return rpcstatus.New(codes.InvalidArgument, ReasonAddr, "node %s: addr %s / http %s is unspecified: the node must advertise a reachable address (-advertise)", n.GetId(), n.GetAddr(), n.GetHttpAddr())
	}
	return nil
}

// encodeRecord builds a node's Redis entry, adding one heartbeat sample to
// this master's window for it, and returns it with the node's heartbeat
// state (whose keys, set once, the caller may read without the lock).
// Every heartbeat runs it: the protos are marshalled straight into the
// record and the window is trimmed in place (it is this master's own,
// under its shard's lock).
//
// written is the entry as the record holds it (its samples a copy), for
// this master's own copy of the registry once the record is in Redis
// (regState.noteOwn).
func (s *Server) encodeRecord(info *willowv1.NodeInfo, load *willowv1.Load, now time.Time) (b []byte, hn *hbNode, written *entry, err error) {
	nowMs := now.UnixMilli()
	sampled := load != nil
	if load == nil {
		load = &willowv1.Load{SuccessRate: 1}
	}
	is, ls := proto.Size(info), proto.Size(load)
	sh := s.hb.shard(info.GetId())
	sh.mu.Lock()
	n := sh.node(s, info.GetId())
	w := n.window
	if sampled {
		w = append(w, sample{At: nowMs, Req: load.GetRequests(), Err: load.GetErrors()})
	}
	from := nowMs - s.cfg.SuccessWindow.Milliseconds()
	i := 0
	for i < len(w) && w[i].At <= from {
		i++
	}
	if i > 0 {
		w = w[:copy(w, w[i:])]
	}
	n.window, n.seen = w, nowMs
	b, err = appendRecordOf(make([]byte, 0, 24+is+ls+30*len(w)), info, is, load, ls, nowMs, w)
	written = &entry{info: info, load: load, lastMs: nowMs, samples: slices.Clone(w)}
	sh.mu.Unlock()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("master: encode node record: %w", err)
	}
	return b, n, written, nil
}

// Register records a node in the shared registry. A node that comes back
// keeps its health judgement: an ejected node stays out until probed.
func (s *Server) Register(ctx context.Context, req *willowv1.RegisterRequest) (*willowv1.RegisterResponse, error) {
	info := req.GetNode()
	if err := validInfo(info); err != nil {
		return nil, err
	}
	fp, err := nodeCaller(ctx, info)
	if err != nil {
		return nil, err
	}
	now := s.now()
	b, _, _, err := s.encodeRecord(info, nil, now)
	if err != nil {
		return nil, err
	}
	s.routeHeartbeat(info.GetId())
	hb, _ := json.Marshal(health{State: StateHealthy, SinceMs: now.UnixMilli()})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.bind(ctx, info.GetId(), fp, false); err != nil {
		s.log.Warn("register refused", "id", info.GetId(), "err", err)
		return nil, err
	}
	err = registerScript.Run(ctx, s.rdb,
		[]string{s.key("nodes"), s.regSeqKey(), s.regChangedKey(), s.nodeKey(info.GetId()), s.healthKey(info.GetId())},
		b, s.cfg.EntryTTL.Milliseconds(), hb, s.healthTTL().Milliseconds(), info.GetId()).Err()
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "register %s: %v", info.GetId(), err)
	}
	s.log.Info("node registered", "id", info.GetId(), "role", info.GetRole(), "region", info.GetRegion(), "addr", info.GetAddr())
	return &willowv1.RegisterResponse{
		NodeId:              info.GetId(),
		HeartbeatIntervalMs: node.DefaultHeartbeatInterval.Milliseconds(),
		Flex:                s.flexSnapshot(),
	}, nil
}

// Heartbeat refreshes a node's entry and load, and answers with the
// drills ordered for it. It asks the node to register again when the
// shared registry no longer knows it.
func (s *Server) Heartbeat(ctx context.Context, req *willowv1.HeartbeatRequest) (*willowv1.HeartbeatResponse, error) {
	return s.heartbeat(ctx, req)
}

// HeartbeatStream is Heartbeat over one long-lived stream: each request
// is handled as a Heartbeat call would handle it, in order. Every request
// is answered, in order, but those that set sparse_answers: they are
// answered only when the answer carries something (sparseSkip). A request
// that Heartbeat refuses (node info invalid, the credential of another
// node, an ID another credential holds) ends the stream with that status,
// reason included; a message that does not decode ends it with grpc-go's
// INTERNAL status (written by the stream before the handler sees the
// error, as for a unary call's request). At N = 5000 a unary heartbeat a
// node a second was mostly grpc-go's per-call work on both sides (a new
// stream, its headers and handler): here a heartbeat is one message in,
// and with sparse answers mostly none out (BenchmarkFleet).
func (s *Server) HeartbeatStream(stream grpc.BidiStreamingServer[willowv1.HeartbeatRequest, willowv1.HeartbeatResponse]) error {
	ctx := stream.Context()
	var last *willowv1.HeartbeatResponse // the last answer sent; nil before the first
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.heartbeat(ctx, req)
		if err != nil {
			return err
		}
		if req.GetSparseAnswers() && sparseSkip(req, resp, last) {
			continue
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		last = resp
	}
}

// sparseSkip reports whether a sparse_answers heartbeat's answer resp
// carries nothing for the node, given the last answer sent on its stream
// (nil: none yet, so the first is always sent): no reregister, the
// node's own flex version, and the drills of the last answer.
func sparseSkip(req *willowv1.HeartbeatRequest, resp, last *willowv1.HeartbeatResponse) bool {
	if last == nil || resp.GetReregister() || resp.GetFlexVersion() != req.GetFlexVersion() {
		return false
	}
	a, b := resp.GetDrills(), last.GetDrills()
	return slices.EqualFunc(a, b, func(x, y *willowv1.Drill) bool { return proto.Equal(x, y) })
}

// heartbeat is one heartbeat of a node, by a unary call or on a stream.
func (s *Server) heartbeat(ctx context.Context, req *willowv1.HeartbeatRequest) (*willowv1.HeartbeatResponse, error) {
	info := req.GetNode()
	if err := validInfo(info); err != nil {
		return nil, err
	}
	fp, err := nodeCaller(ctx, info)
	if err != nil {
		return nil, err
	}
	now := s.now()
	b, hn, written, err := s.encodeRecord(info, req.GetLoad(), now)
	if err != nil {
		return nil, err
	}
	s.routeHeartbeat(info.GetId())
	// A heartbeat waits 2 s at most for its batch: the caller's own
	// deadline when it is sooner (a node's unary heartbeat call has one,
	// so it needs no timer of its own; a stream has none, so each of its
	// heartbeats gets one).
	if dl, ok := ctx.Deadline(); !ok || dl.Sub(now) > 2*time.Second {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	// Group commit: one script call for the heartbeats that arrive
	// together (hbbatch.go).
	res, err := s.hbb.do(ctx, &hbCall{id: info.GetId(), fp: fp, rec: b, written: written, nodeKey: hn.nodeKey, bindKey: hn.bindKey}, s.writeHeartbeats)
	switch {
	case err != nil:
		// Redis is away or not keeping up (errHBBusy): this master still
		// counts the heartbeat (Route uses it) and answers from its cache.
		s.heartbeatNotWritten(info.GetId(), err)
		return &willowv1.HeartbeatResponse{FlexVersion: s.flexSnapshot().GetVersion(),
			Drills: s.drillsFor(info.GetId(), info.GetAddr(), now)}, nil
	case res == "taken":
		return nil, rpcstatus.New(codes.PermissionDenied, ReasonNodeIDTaken,
			"node %s is registered and alive with another credential", info.GetId())
	}
	resp := &willowv1.HeartbeatResponse{Reregister: res != "ok", FlexVersion: s.flexSnapshot().GetVersion()}
	resp.Drills = s.drillsFor(info.GetId(), info.GetAddr(), now)
	return resp, nil
}

// heartbeatNotWritten counts a heartbeat that did not reach Redis, and
// logs one such a second at most: under overload every node's heartbeat
// fails the same way, and a line each would add to the overload.
func (s *Server) heartbeatNotWritten(id string, err error) {
	reason := "redis"
	if errors.Is(err, errHBBusy) {
		reason = "queue_full"
	}
	s.met.hbNotWritten.WithLabelValues(reason).Inc()
	now := s.now().UnixMilli()
	if last := s.hbLogMs.Load(); now-last >= 1000 && s.hbLogMs.CompareAndSwap(last, now) {
		s.log.Warn("heartbeat not written to redis (counted here; one line a second)", "id", id, "reason", reason, "err", err)
	}
}

// loadView reads the whole registry from Redis. Entries whose record
// expired are pruned from the index.
func (s *Server) loadView(ctx context.Context) (*view, error) {
	v, err := s.readView(ctx)
	s.mu.Lock()
	switch {
	case err != nil:
		s.redisUp = time.Time{}
	case s.redisUp.IsZero():
		s.redisUp = s.now()
	}
	s.mu.Unlock()
	return v, err
}

// redisUpFor reports how long Redis has answered without a failure.
func (s *Server) redisUpFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redisUp.IsZero() {
		return 0
	}
	return s.now().Sub(s.redisUp)
}

// cached returns the last registry snapshot, loading one if there is none.
// Heartbeats this master received after the snapshot count, so its nodes
// stay routable while Redis is away.
func (s *Server) cached(ctx context.Context) (*view, error) { return s.cachedRole(ctx, "") }

// cachedRole is cached for the nodes of one role ("": every role).
func (s *Server) cachedRole(ctx context.Context, role string) (*view, error) {
	v, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.withSeenOf(v, role), nil
}

// snapshot returns the last registry snapshot, loading one if there is
// none.
func (s *Server) snapshot(ctx context.Context) (*view, error) {
	s.mu.Lock()
	v := s.view
	s.mu.Unlock()
	if v.at.IsZero() {
		return s.refresh(ctx)
	}
	return v, nil
}

// withSeen returns v with the last heartbeats this master received.
func (s *Server) withSeen(v *view) *view { return s.withSeenOf(v, "") }

// withSeenOf is withSeen for the entries of one role ("": every role).
func (s *Server) withSeenOf(v *view, role string) *view {
	out := &view{at: v.at, gen: v.gen, entries: make([]*entry, 0, len(v.entries))}
	for _, e := range v.entries {
		if role != "" && e.info.GetRole() != role {
			continue
		}
		if ms := s.hb.seenMs(e.info.GetId()); ms > e.lastMs {
			c := *e
			c.lastMs = ms
			e = &c
		}
		out.entries = append(out.entries, e)
	}
	return out
}

// refresh reloads the registry and the drills from Redis into the cache.
func (s *Server) refresh(ctx context.Context) (*view, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := s.loadView(ctx)
	if err != nil {
		return nil, err
	}
	drills, err := s.loadDrills(ctx)
	if err != nil {
		return nil, err
	}
	// The snapshot and its route index are installed together (the index
	// built first, under the route build lock), so a Route finds the index
	// of the snapshot it reads and never builds one (route_index.go).
	s.routes.buildMu.Lock()
	seq := s.routes.started.Add(1)
	idx := s.buildRouteIndex(v, s.now())
	idx.seq = seq
	s.mu.Lock()
	if v.gen < s.view.gen {
		// A load that finished after a later one (refresh runs from the
		// ticker, ListNodes and Route at once): keep the later snapshot,
		// or Route would answer from the older one, possibly from before
		// the nodes it lists registered.
		s.mu.Unlock()
		s.routes.buildMu.Unlock()
		return v, nil
	}
	s.view = v
	s.drills.Store(&drills)
	s.routes.idx.Store(idx)
	s.mu.Unlock()
	s.routes.buildMu.Unlock()
	// Housekeeping, not at every refresh (four a second; each walked
	// every node): this master's heartbeat state of the nodes gone from
	// the registry is dropped when its members changed, and the node
	// gauges are set at most once a second.
	if m := v.members; s.reg.forgotAt.Swap(m) != m {
		known := make(map[string]bool, len(v.entries))
		for _, e := range v.entries {
			known[e.info.GetId()] = true
		}
		s.hb.forget(known) // nodes gone from the registry
	}
	now := s.now()
	if ms, last := now.UnixMilli(), s.reg.observedMs.Load(); ms-last >= 1000 || ms < last {
		if s.reg.observedMs.CompareAndSwap(last, ms) {
			s.met.observe(v, now, s.cfg.MissedAfter)
		}
	}
	return v, nil
}

// runRefresh keeps the cache fresh until ctx is done. While Redis is down
// the master keeps answering from its last snapshot.
func (s *Server) runRefresh(ctx context.Context) {
	t := time.NewTicker(s.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if _, err := s.refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("refresh registry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ListNodes lists every known node with its state, read fresh from Redis
// (the cached snapshot when Redis does not answer). Masters do not
// register; role "master" asks for the answering master itself (its
// gRPC and admin addresses; reason "leader" while it holds the lease).
func (s *Server) ListNodes(ctx context.Context, req *willowv1.ListNodesRequest) (*willowv1.ListNodesResponse, error) {
	if req.GetRole() == "master" {
		self := &willowv1.NodeStatus{Node: s.node.Info(), State: "healthy", StateSinceUnixMs: s.started.UnixMilli()}
		if s.isLeader() {
			self.Reason = "leader"
		}
		return &willowv1.ListNodesResponse{Nodes: []*willowv1.NodeStatus{self}}, nil
	}
	v, err := s.refresh(ctx)
	if err != nil {
		s.log.Warn("list nodes: using cache", "err", err)
		if v, err = s.cached(ctx); err != nil {
			return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "list nodes: %v", err)
		}
	}
	v = s.withSeen(v)
	now := s.now()
	resp := &willowv1.ListNodesResponse{}
	for _, e := range v.entries {
		if req.GetRole() != "" && e.info.GetRole() != req.GetRole() {
			continue
		}
		st, since, reason := e.state(now, s.cfg.MissedAfter)
		resp.Nodes = append(resp.Nodes, &willowv1.NodeStatus{
			Node: e.info, State: st, Load: e.load, StateSinceUnixMs: since,
			LastHeartbeatUnixMs: e.lastMs, Reason: reason,
		})
	}
	sort.Slice(resp.Nodes, func(i, j int) bool {
		a, b := resp.Nodes[i].GetNode(), resp.Nodes[j].GetNode()
		if a.GetRole() != b.GetRole() {
			return a.GetRole() < b.GetRole()
		}
		if a.GetRegion() != b.GetRegion() {
			return a.GetRegion() < b.GetRegion()
		}
		return a.GetId() < b.GetId()
	})
	return resp, nil
}
