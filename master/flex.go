package master

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"willow/flex"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
)

// Flex timing and limits.
const (
	// FlexReloadInterval is how often a master rereads the flex document
	// from Redis, a safety net under pub/sub.
	FlexReloadInterval = time.Second
	// flexExpiryTick is how often due expiries are checked.
	flexExpiryTick = 100 * time.Millisecond
	// auditKeep is how many audit entries Redis keeps.
	auditKeep = 10000
	// defaultHistory is FlexHistory's default limit.
	defaultHistory = 50
	// redisTimeout bounds every Redis call of the flex code.
	redisTimeout = 2 * time.Second
	// getFlexReadTimeout bounds GetFlex's read-through; past it the local
	// copy is served.
	getFlexReadTimeout = 300 * time.Millisecond
	// casAttempts bounds retries when another master commits concurrently.
	casAttempts = 10
)

// Errors of the flex code, turned into gRPC status by flexStatus.
var (
	errVersionConflict = errors.New("version conflict")
	errNoPrevious      = errors.New("no previous version to roll back to")
	// errUnchanged: the change asked for is the state already in force
	// (flex set LEVEL at that level); SetFlex answers it without a commit.
	errUnchanged = errors.New("flex state unchanged")
)

// flexState is the master's part that holds the flex document.
type flexState struct {
	plans *flex.Plans
	store flexStore // flexstore.go

	commitMu sync.Mutex // serializes this master's commits

	flexMu   sync.Mutex                 // guards the fields below
	doc      flexDoc                    // the last document seen (local or Redis)
	rendered *willowv1.FlexState        // doc rendered with plans
	changed  chan struct{}              // closed and replaced on every new version
	watch    atomic.Pointer[watchState] // rendered and changed for Watch (watch.go), set with them

	following chan struct{} // closed once runFlex is subscribed to other masters' changes

	flexChanges *prometheus.CounterVec
	flexVersion prometheus.Gauge
}

// flexDoc is the document persisted in Redis: the editable setting, the
// setting before the last change (rollback), and pending expiries.
//
// Version is the flex version nodes see: it moves only when what nodes run
// (level, knobs, scopes, expiry, attribution) changes. Rev moves on every
// write and is what the compare-and-set checks: an auto-flex mode change, a
// dry-run proposal or a new schedule is a new Rev under the same Version,
// so nodes get no Watch event with the knobs they already run.
type flexDoc struct {
	Version   int64           `json:"version"`
	Rev       int64           `json:"rev,omitempty"` // 0 in documents older than Rev: read as Version
	Setting   flex.Setting    `json:"setting"`
	Prev      *flex.Setting   `json:"prev,omitempty"`
	Pending   []pendingRevert `json:"pending,omitempty"`
	Actor     string          `json:"actor,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	ChangedAt int64           `json:"changed_at_unix_ms,omitempty"`
	// Auto is the auto-flex state (autoflex_run.go), Schedules the
	// scheduled changes (schedule.go): in the document, so they survive
	// restarts and failover and change under the same compare-and-set.
	Auto      autoDoc       `json:"auto,omitempty"`
	Schedules []scheduleDoc `json:"schedules,omitempty"`
	NextSched int64         `json:"next_schedule,omitempty"`
}

// rev is the document's revision (Version in documents without one).
func (d flexDoc) rev() int64 { return max(d.Rev, d.Version) }

// pendingRevert is a change made with an expiry: at At the master undoes
// Before -> After (flex.Revert).
type pendingRevert struct {
	Version int64        `json:"version"`
	At      int64        `json:"at_unix_ms"`
	Before  flex.Setting `json:"before"`
	After   flex.Setting `json:"after"`
	Actor   string       `json:"actor,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	Scope   string       `json:"scope,omitempty"`
}

// initFlex loads the level plans and the document from store, and
// registers the flex metrics on reg.
func (s *Server) initFlex(store flexStore, reg prometheus.Registerer) error {
	plans := flex.DefaultPlans()
	if s.cfg.LevelsFile != "" {
		data, err := os.ReadFile(s.cfg.LevelsFile)
		if err != nil {
			return fmt.Errorf("master: levels file: %w", err)
		}
		if plans, err = flex.LoadPlans(data); err != nil {
			return fmt.Errorf("master: levels file %s: %w", s.cfg.LevelsFile, err)
		}
	}
	s.plans = plans
	s.normalCodec = normalCodec(plans) // plans do not change while the master runs
	s.store = store
	s.changed = make(chan struct{})
	s.following = make(chan struct{})
	s.flexChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "willow_master_flex_changes_total",
		Help: "Flex change attempts by action and result (accepted, denied, invalid, or the failure reason).",
	}, []string{"action", "result"})
	s.flexVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "willow_master_flex_version", Help: "Version of the flex document this master holds.",
	})
	for _, c := range []prometheus.Collector{s.flexChanges, s.flexVersion} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("master: metrics: %w", err)
		}
	}
	st, err := s.plans.Render(flex.Setting{})
	if err != nil {
		return fmt.Errorf("master: render normal level: %w", err)
	}
	s.rendered = st
	s.publishWatch(st, s.changed)
	ctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
	defer cancel()
	if err := s.reloadFlex(ctx); err != nil {
		// Not fatal: the master serves the defaults and the reload loop
		// picks the document up when Redis answers.
		s.log.Warn("flex: load from redis", "err", err)
	}
	return nil
}

// flexSnapshot returns the current flex state for Route replies. The
// caller must not modify it.
func (s *Server) flexSnapshot() *willowv1.FlexState {
	// Every heartbeat and Route answer reads it: without the flex mutex.
	return s.watch.Load().st
}

// audit records one entry in the audit log kept in Redis (FlexHistory
// lists it). Failures are logged.
func (s *Server) audit(e *willowv1.AuditEntry) {
	if e.AtUnixMs == 0 {
		e.AtUnixMs = s.now().UnixMilli()
	}
	b, err := protojson.Marshal(e)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), redisTimeout)
		defer cancel()
		err = s.store.Audit(ctx, b)
	}
	if err != nil {
		s.log.Error("flex: audit", "err", err, "action", e.GetAction())
	}
	s.log.Info("audit", "action", e.GetAction(), "actor", e.GetActor(), "accepted", e.GetAccepted(),
		"from", e.GetFromVersion(), "to", e.GetToVersion(), "reason", e.GetReason(), "error", e.GetError())
}

// runFlex follows other masters' changes (pub/sub plus a periodic reload)
// and reverts expired changes until ctx is done.
func (s *Server) runFlex(ctx context.Context) {
	msgs := s.store.Changes(ctx)
	// A change another master made before the subscription took hold was
	// not signalled: read the document once now rather than at the first
	// periodic reload, a full FlexReloadInterval later.
	if err := s.reloadFlexTimeout(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("flex: first reload (nodes keep the last state)", "err", err)
	}
	close(s.following)
	reload := time.NewTicker(FlexReloadInterval)
	defer reload.Stop()
	expiry := time.NewTicker(flexExpiryTick)
	defer expiry.Stop()
	var lastLog time.Time // while Redis is down, log once per reload interval
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-msgs:
			err = s.reloadFlexTimeout(ctx)
		case <-reload.C:
			err = s.reloadFlexTimeout(ctx)
		case <-expiry.C:
			err = s.expireDue(ctx)
		}
		if now := s.now(); err != nil && ctx.Err() == nil && now.Sub(lastLog) >= FlexReloadInterval {
			lastLog = now
			s.log.Warn("flex: background (nodes keep the last state)", "err", err)
		}
	}
}

func (s *Server) reloadFlexTimeout(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return s.reloadFlex(ctx)
}

// reloadFlex reads the document from Redis and installs it when newer.
// An empty Redis gets version 1, the normal level: nodes treat version 0
// as "unversioned", so the master never serves it once Redis answers.
func (s *Server) reloadFlex(ctx context.Context) error {
	d, err := s.loadDoc(ctx)
	if err != nil {
		return err
	}
	if d.Version == 0 {
		_, _, err := s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
			if cur.Version != 0 {
				return cur, nil, errNothingDue // another master bootstrapped
			}
			nd := flexDoc{Version: 1, Actor: "master", Reason: "initial state", ChangedAt: s.now().UnixMilli()}
			return nd, &willowv1.AuditEntry{Actor: "master", Action: "init", Reason: "initial state"}, nil
		})
		if errors.Is(err, errNothingDue) {
			return s.reloadFlex(ctx)
		}
		return err
	}
	s.install(d)
	return nil
}

// loadDoc reads the document; an absent one is version 0, the normal level.
func (s *Server) loadDoc(ctx context.Context) (flexDoc, error) { return s.store.Load(ctx) }

// render returns the FlexState of d.
func (s *Server) render(d flexDoc) (*willowv1.FlexState, error) {
	st, err := s.plans.Render(d.Setting)
	if err != nil {
		return nil, err
	}
	st.Version = d.Version
	st.Actor = d.Actor
	st.Reason = d.Reason
	st.ChangedAtUnixMs = d.ChangedAt
	for _, p := range d.Pending {
		if st.ExpiresAtUnixMs == 0 || p.At < st.ExpiresAtUnixMs {
			st.ExpiresAtUnixMs = p.At
		}
	}
	return st, nil
}

// install makes d the current document if it is a newer revision. Only
// a new flex version wakes watchers and reaches the master's own node (its
// willow_flex_version and willow_flex_level agree with
// willow_master_flex_version): a revision that changes auto-flex state or
// schedules alone leaves what nodes run as it is.
func (s *Server) install(d flexDoc) {
	s.flexMu.Lock()
	if d.rev() <= s.doc.rev() {
		s.flexMu.Unlock()
		return
	}
	if d.Version == s.doc.Version {
		s.doc = d
		s.flexMu.Unlock()
		return
	}
	st, err := s.render(d)
	if err != nil {
		s.flexMu.Unlock()
		s.log.Error("flex: document does not render with the current levels", "version", d.Version, "err", err)
		return
	}
	s.doc, s.rendered = d, st
	s.flexVersion.Set(float64(d.Version))
	old := s.changed // published before it is closed: a woken stream finds the new state
	s.changed = make(chan struct{})
	s.publishWatch(st, s.changed)
	close(old)
	s.flexMu.Unlock()
	if s.node != nil {
		s.node.ApplyFlex(st)
	}
}

// current returns the document, its rendering and the change channel.
func (s *Server) current() (flexDoc, *willowv1.FlexState, <-chan struct{}) {
	s.flexMu.Lock()
	defer s.flexMu.Unlock()
	return s.doc, s.rendered, s.changed
}

// mutation computes the next document from the current one and the audit
// entry describing it (action, actor, scope, reason filled).
type mutation func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error)

// commit applies m with compare-and-set on the version in Redis, retrying
// when another master committed in between. It returns the previous and
// the new state.
func (s *Server) commit(ctx context.Context, m mutation) (prev, next *willowv1.FlexState, err error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	for attempt := 0; attempt < casAttempts; attempt++ {
		if attempt > 0 {
			// Another master committed first: back off a little, reread.
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, redisTimeout)
		cur, err := s.loadDoc(rctx)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		nd, entry, err := m(cur)
		if err != nil {
			return nil, nil, err
		}
		// Never go backwards, even if Redis lost the document.
		local, _, _ := s.current()
		nd.Rev = max(cur.rev(), local.rev()) + 1
		prev, err = s.render(cur)
		if err != nil {
			return nil, nil, err
		}
		prev.Version = cur.Version
		nd.Version = cur.Version
		next, err = s.render(nd)
		if err != nil {
			return nil, nil, err
		}
		if cur.Version == 0 || cur.Version < local.Version || !proto.Equal(prev, next) {
			// What nodes run changes: a new flex version.
			nd.Version = max(cur.Version, local.Version) + 1
			if nd.Version == 1 && entry.GetAction() != "init" {
				nd.Version = 2 // version 1 is the initial normal state
			}
			next.Version = nd.Version
		}
		entry.AtUnixMs = nd.ChangedAt
		entry.FromVersion, entry.ToVersion = cur.Version, nd.Version
		entry.From, entry.To = flex.Summary(prev, s.plans), flex.Summary(next, s.plans)
		entry.Accepted = entry.GetError() == ""
		auditJSON, err := protojson.Marshal(entry)
		if err != nil {
			return nil, nil, err
		}
		rctx, cancel = context.WithTimeout(ctx, redisTimeout)
		ok, err := s.store.Swap(rctx, cur.rev(), nd, auditJSON)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		if ok {
			s.install(nd)
			s.flexChanges.WithLabelValues(entry.GetAction(), "accepted").Inc()
			s.log.Info("flex changed", "action", entry.GetAction(), "actor", entry.GetActor(), "from", cur.Version,
				"to", nd.Version, "change", entry.GetTo(), "reason", entry.GetReason())
			return prev, next, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: the document kept changing under %d attempts", errVersionConflict, casAttempts)
}

// expireDue reverts the changes whose expiry has passed.
func (s *Server) expireDue(ctx context.Context) error {
	d, _, _ := s.current()
	now := s.now().UnixMilli()
	due := false
	for _, p := range d.Pending {
		if p.At <= now {
			due = true
		}
	}
	if !due {
		return nil
	}
	var expired []pendingRevert
	_, _, err := s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		expired = expired[:0]
		nd := cur
		nd.Pending = nil
		for _, p := range cur.Pending {
			if p.At <= now {
				expired = append(expired, p)
			} else {
				nd.Pending = append(nd.Pending, p)
			}
		}
		if len(expired) == 0 {
			return cur, nil, errNothingDue
		}
		// Undo the latest change first.
		sort.Slice(expired, func(i, j int) bool { return expired[i].Version > expired[j].Version })
		set := cur.Setting.Clone()
		reason := ""
		for i, p := range expired {
			set = flex.Revert(set, p.Before, p.After)
			if i > 0 {
				reason += "; "
			}
			reason += fmt.Sprintf("expiry of v%d (%s: %s)", p.Version, p.Actor, p.Reason)
		}
		prev := cur.Setting.Clone()
		nd.Setting, nd.Prev = set, &prev
		nd.Actor, nd.Reason, nd.ChangedAt = "master", reason, s.now().UnixMilli()
		return nd, &willowv1.AuditEntry{Actor: "master", Action: "expire", Scope: expired[0].Scope, Reason: reason}, nil
	})
	if errors.Is(err, errNothingDue) {
		return nil
	}
	return err
}

var errNothingDue = errors.New("nothing due")

// GetFlex returns the current flex state, reread from Redis so that it
// includes changes made through other masters a moment ago; when Redis
// does not answer it returns the state this master holds.
func (s *Server) GetFlex(ctx context.Context, _ *willowv1.GetFlexRequest) (*willowv1.FlexState, error) {
	rctx, cancel := context.WithTimeout(ctx, getFlexReadTimeout)
	defer cancel()
	if err := s.reloadFlex(rctx); err != nil {
		s.log.Warn("flex: GetFlex serves the local copy", "err", err)
	}
	return proto.Clone(s.flexSnapshot()).(*willowv1.FlexState), nil
}

// SetFlex validates and applies a change: a level switch and/or single-knob
// overrides, globally or in one scope, optionally expiring. Errors:
// UNAUTHENTICATED/PERMISSION_DENIED (an on-call operator only, see operator), INVALID_ARGUMENT with
// reason invalid_knob, unknown_knob, unknown_business, unknown_level,
// invalid_scope, invalid_expiry, missing_reason or empty_change, ABORTED
// version_conflict, UNAVAILABLE redis. A dry run changes
// nothing and returns the state the change would make. Accepted changes
// and refused ones (bad token, invalid) are written to the audit log.
func (s *Server) SetFlex(ctx context.Context, req *willowv1.SetFlexRequest) (*willowv1.SetFlexResponse, error) {
	action := "knob"
	if req.GetLevel() != "" {
		action = "set"
	}
	actor, err := s.authorize(ctx, req.GetToken(), action, req.GetScope(), req.GetReason())
	if err != nil {
		return nil, err
	}
	if err := s.validateSet(req); err != nil {
		s.flexChanges.WithLabelValues(action, "invalid").Inc()
		if !req.GetDryRun() {
			cur, _, _ := s.current()
			s.audit(&willowv1.AuditEntry{Actor: actor, Action: action, Scope: req.GetScope(), Reason: req.GetReason(),
				FromVersion: cur.Version, ToVersion: cur.Version, To: describeRequest(req), Error: rpcstatus.Line(err)})
		}
		return nil, err
	}
	mut := func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		if ev := req.GetExpectedVersion(); ev != 0 && ev != cur.Version {
			return cur, nil, fmt.Errorf("%w: the flex state is at version %d, you expected %d: reread it and retry", errVersionConflict, cur.Version, ev)
		}
		nd := s.applyChange(cur, req, actor, req.GetReason())
		if s.sameEffect(cur, nd) {
			return cur, nil, errUnchanged
		}
		return nd, &willowv1.AuditEntry{Actor: actor, Action: action, Scope: req.GetScope(), Reason: req.GetReason()}, nil
	}
	unchanged := func() (*willowv1.SetFlexResponse, error) {
		// Nothing to do: no new version, no audit entry, no hold.
		s.flexChanges.WithLabelValues(action, "unchanged").Inc()
		_, st, _ := s.current()
		return &willowv1.SetFlexResponse{Flex: st, Previous: st}, nil
	}
	if req.GetDryRun() {
		rctx, cancel := context.WithTimeout(ctx, redisTimeout)
		cur, err := s.loadDoc(rctx)
		cancel()
		if err != nil {
			return nil, flexStatus(err)
		}
		nd, _, err := mut(cur)
		if errors.Is(err, errUnchanged) {
			return unchanged()
		}
		if err != nil {
			return nil, flexStatus(err)
		}
		prev, err := s.render(cur)
		if err != nil {
			return nil, flexStatus(err)
		}
		next, err := s.render(nd)
		if err != nil {
			return nil, flexStatus(err)
		}
		return &willowv1.SetFlexResponse{Flex: next, Previous: prev}, nil
	}
	prev, next, err := s.commit(ctx, mut)
	if errors.Is(err, errUnchanged) {
		return unchanged()
	}
	if err != nil {
		err = flexStatus(err)
		s.flexChanges.WithLabelValues(action, rpcstatus.Reason(err)).Inc()
		if rpcstatus.Reason(err) == redisconn.ReasonRedis {
			// The audit log lives in Redis too: log only.
			s.log.Warn("flex change failed", "action", action, "actor", actor, "err", err)
			return nil, err
		}
		cur, _, _ := s.current()
		s.audit(&willowv1.AuditEntry{Actor: actor, Action: action, Scope: req.GetScope(), Reason: req.GetReason(),
			FromVersion: cur.Version, ToVersion: cur.Version, To: describeRequest(req), Error: rpcstatus.Line(err)})
		return nil, err
	}
	return &willowv1.SetFlexResponse{Flex: next, Previous: prev}, nil
}

// applyChange returns cur with req's level and knobs applied (globally or
// in its scope), an expiry when req has for_ms, and auto-flex paused for
// the manual hold: every change through here is a human's.
func (s *Server) applyChange(cur flexDoc, req *willowv1.SetFlexRequest, actor, reason string) flexDoc {
	set := cur.Setting.Clone()
	if req.GetScope() == "" {
		if req.GetLevel() != "" {
			// A global level switch is the plan exactly: it clears the
			// global overrides and widens every staged rollout.
			set = flex.Setting{Global: flex.Layer{Level: req.GetLevel()}}
		}
		set.Global.Overrides = merge(set.Global.Overrides, req.GetKnobs())
	} else {
		l := set.Scopes[req.GetScope()]
		if req.GetLevel() != "" {
			l = flex.Layer{Level: req.GetLevel()}
		}
		l.Overrides = merge(l.Overrides, req.GetKnobs())
		if set.Scopes == nil {
			set.Scopes = map[string]flex.Layer{}
		}
		set.Scopes[req.GetScope()] = l
	}
	now := s.now().UnixMilli()
	prev := cur.Setting.Clone()
	nd := cur
	nd.Version, nd.Setting, nd.Prev = cur.Version+1, set, &prev
	nd.Actor, nd.Reason, nd.ChangedAt = actor, reason, now
	if req.GetForMs() > 0 {
		nd.Pending = append(append([]pendingRevert(nil), cur.Pending...), pendingRevert{
			Version: cur.Version + 1, At: now + req.GetForMs(), Before: prev, After: set.Clone(),
			Actor: actor, Reason: reason, Scope: req.GetScope(),
		})
	}
	nd.Auto = s.pauseAuto(cur.Auto, actor, reason, now)
	return nd
}

// sameEffect reports whether documents a and b render to the same level,
// knobs and scopes (what nodes run), whatever their versions and
// attribution.
func (s *Server) sameEffect(a, b flexDoc) bool {
	ra, err := s.plans.Render(a.Setting)
	if err != nil {
		return false
	}
	rb, err := s.plans.Render(b.Setting)
	if err != nil {
		return false
	}
	return proto.Equal(ra, rb)
}

func merge(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// describeRequest summarizes a rejected request for the audit log.
func describeRequest(req *willowv1.SetFlexRequest) string {
	s := ""
	if req.GetLevel() != "" {
		s = "level=" + req.GetLevel()
	}
	keys := make([]string, 0, len(req.GetKnobs()))
	for k := range req.GetKnobs() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s != "" {
			s += " "
		}
		s += k + "=" + req.GetKnobs()[k]
	}
	if req.GetScope() != "" {
		s += " @" + req.GetScope()
	}
	return s
}

// validateSet checks a SetFlex request before it touches the document.
func (s *Server) validateSet(req *willowv1.SetFlexRequest) error {
	if req.GetReason() == "" {
		return rpcstatus.New(codes.InvalidArgument, ReasonMissingReason, "every flex change needs a reason (--reason)")
	}
	if req.GetLevel() == "" && len(req.GetKnobs()) == 0 {
		return rpcstatus.New(codes.InvalidArgument, ReasonEmptyChange, "nothing to change: give a level or knobs")
	}
	if err := flex.ValidateScope(req.GetScope()); err != nil {
		return flexStatus(err)
	}
	if req.GetForMs() < 0 {
		return rpcstatus.New(codes.InvalidArgument, ReasonInvalidExpiry, "expiry is in the past (for %s): it must be a positive duration", time.Duration(req.GetForMs())*time.Millisecond)
	}
	if req.GetLevel() != "" {
		if _, err := s.plans.Plan(req.GetLevel()); err != nil {
			return flexStatus(err)
		}
	}
	names := make([]string, 0, len(req.GetKnobs()))
	for k := range req.GetKnobs() {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := s.plans.Validate(k, req.GetKnobs()[k]); err != nil {
			return flexStatus(err)
		}
	}
	return nil
}

// flexStatus converts flex errors into gRPC status errors with a reason.
func flexStatus(err error) error {
	if rpcstatus.Reason(err) != "" {
		return err
	}
	switch {
	case errors.Is(err, flex.ErrUnknownKnob):
		return rpcstatus.New(codes.InvalidArgument, flex.ReasonUnknownKnob, "%v", err)
	case errors.Is(err, flex.ErrUnknownBusiness):
		return rpcstatus.New(codes.InvalidArgument, flex.ReasonUnknownBusiness, "%v", err)
	case errors.Is(err, flex.ErrOutOfRange):
		return rpcstatus.New(codes.InvalidArgument, flex.ReasonInvalidKnob, "%v", err)
	case errors.Is(err, flex.ErrUnknownLevel):
		return rpcstatus.New(codes.InvalidArgument, flex.ReasonUnknownLevel, "%v", err)
	case errors.Is(err, flex.ErrBadScope):
		return rpcstatus.New(codes.InvalidArgument, flex.ReasonInvalidScope, "%v", err)
	case errors.Is(err, errVersionConflict):
		return rpcstatus.New(codes.Aborted, ReasonVersionConflict, "%v", err)
	case errors.Is(err, errNoPrevious):
		return rpcstatus.New(codes.FailedPrecondition, ReasonNoPrevious, "%v", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rpcstatus.New(codes.DeadlineExceeded, rpcstatus.ReasonDeadline, "%v", err)
	}
	return rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "flex store: %v", err)
}

// RollbackFlex reverts to the state before the current version (a second
// rollback re-applies it). Errors as SetFlex, plus FAILED_PRECONDITION
// no_previous.
func (s *Server) RollbackFlex(ctx context.Context, req *willowv1.RollbackFlexRequest) (*willowv1.SetFlexResponse, error) {
	actor, err := s.authorize(ctx, req.GetToken(), "rollback", "", req.GetReason())
	if err != nil {
		return nil, err
	}
	if req.GetReason() == "" {
		return nil, rpcstatus.New(codes.InvalidArgument, ReasonMissingReason, "a rollback needs a reason (--reason)")
	}
	prev, next, err := s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		if ev := req.GetExpectedVersion(); ev != 0 && ev != cur.Version {
			return cur, nil, fmt.Errorf("%w: the flex state is at version %d, you expected %d: reread it and retry", errVersionConflict, cur.Version, ev)
		}
		if cur.Prev == nil {
			return cur, nil, errNoPrevious
		}
		back := cur.Setting.Clone()
		nd := cur
		nd.Version, nd.Setting, nd.Prev = cur.Version+1, cur.Prev.Clone(), &back
		nd.Actor, nd.Reason, nd.ChangedAt = actor, req.GetReason(), s.now().UnixMilli()
		nd.Auto = s.pauseAuto(cur.Auto, actor, req.GetReason(), nd.ChangedAt)
		return nd, &willowv1.AuditEntry{Actor: actor, Action: "rollback", Reason: req.GetReason()}, nil
	})
	if err != nil {
		err = flexStatus(err)
		if rpcstatus.Reason(err) == redisconn.ReasonRedis {
			s.log.Warn("flex rollback failed", "actor", actor, "err", err)
			return nil, err
		}
		cur, _, _ := s.current()
		s.audit(&willowv1.AuditEntry{Actor: actor, Action: "rollback", Reason: req.GetReason(),
			FromVersion: cur.Version, ToVersion: cur.Version, Error: rpcstatus.Line(err)})
		return nil, err
	}
	return &willowv1.SetFlexResponse{Flex: next, Previous: prev}, nil
}

// FlexHistory lists the audit log, newest first.
func (s *Server) FlexHistory(ctx context.Context, req *willowv1.FlexHistoryRequest) (*willowv1.FlexHistoryResponse, error) {
	limit := int64(req.GetLimit())
	if limit <= 0 {
		limit = defaultHistory
	}
	limit = min(limit, auditKeep)
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	raws, err := s.store.History(ctx, limit)
	if err != nil {
		return nil, rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "read audit log: %v", err)
	}
	resp := &willowv1.FlexHistoryResponse{}
	for _, r := range raws {
		e := &willowv1.AuditEntry{}
		if err := protojson.Unmarshal([]byte(r), e); err != nil {
			s.log.Warn("flex: bad audit entry", "err", err)
			continue
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}
