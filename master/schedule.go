package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"google.golang.org/grpc/codes"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// Scheduled changes: a flex change stored now and applied by the leading
// master at a given time (the video bitrate must be armed hours ahead).
// They live in the flex document, so a restart or failover keeps them;
// applying one is a compare-and-set that marks it applied in the same
// write, so it is applied once. A change is validated when scheduled and
// again when applied (the levels may have changed): one that no longer
// validates is marked failed with the error, and the failure is audited.
// An applied change is a human's change: it pauses auto-flex.

// Schedule states.
const (
	SchedulePending   = "pending"
	ScheduleApplied   = "applied"
	ScheduleFailed    = "failed"
	ScheduleCancelled = "cancelled"
)

const (
	// maxScheduleAhead bounds how far ahead a change may be scheduled.
	maxScheduleAhead = 90 * 24 * time.Hour
	// maxPendingSchedules bounds the pending changes.
	maxPendingSchedules = 100
	// keepDoneSchedules is how many applied, failed or cancelled changes
	// the document keeps for listing.
	keepDoneSchedules = 50
)

// scheduleDoc is one scheduled change in the flex document.
type scheduleDoc struct {
	ID        string            `json:"id"`
	At        int64             `json:"at_unix_ms"`
	Level     string            `json:"level,omitempty"`
	Knobs     map[string]string `json:"knobs,omitempty"`
	Scope     string            `json:"scope,omitempty"`
	ForMs     int64             `json:"for_ms,omitempty"`
	Reason    string            `json:"reason"`
	Actor     string            `json:"actor"`
	CreatedAt int64             `json:"created_at_unix_ms"`
	State     string            `json:"state"`
	Error     string            `json:"error,omitempty"`
	Version   int64             `json:"applied_version,omitempty"`
	DoneAt    int64             `json:"done_at_unix_ms,omitempty"`
}

func (d scheduleDoc) request() *willowv1.SetFlexRequest {
	return &willowv1.SetFlexRequest{Level: d.Level, Knobs: d.Knobs, Scope: d.Scope, ForMs: d.ForMs, Reason: d.Reason}
}

func (d scheduleDoc) proto() *willowv1.ScheduledChange {
	return &willowv1.ScheduledChange{Id: d.ID, AtUnixMs: d.At, Level: d.Level, Knobs: maps.Clone(d.Knobs), Scope: d.Scope,
		ForMs: d.ForMs, Reason: d.Reason, Actor: d.Actor, CreatedAtUnixMs: d.CreatedAt, State: d.State, Error: d.Error,
		AppliedVersion: d.Version, DoneAtUnixMs: d.DoneAt}
}

// describe is the audit summary of a scheduled change.
func (d scheduleDoc) describe() string {
	s := fmt.Sprintf("%s at %s: %s", d.ID, time.UnixMilli(d.At).UTC().Format(time.RFC3339), describeRequest(d.request()))
	if d.ForMs > 0 {
		s += fmt.Sprintf(" for %s", time.Duration(d.ForMs)*time.Millisecond)
	}
	return s
}

// ScheduleFlex stores a change to apply at change.at_unix_ms. It is
// validated now as SetFlex would validate it; the time must be in the
// future and at most 90 days ahead. Errors: those of SetFlex, and
// INVALID_ARGUMENT invalid_time, FAILED_PRECONDITION too_many_schedules.
func (s *Server) ScheduleFlex(ctx context.Context, req *willowv1.ScheduleFlexRequest) (*willowv1.ScheduledChange, error) {
	c := req.GetChange()
	actor, err := s.authorize(ctx, req.GetToken(), "schedule", c.GetScope(), c.GetReason())
	if err != nil {
		return nil, err
	}
	sd := scheduleDoc{At: c.GetAtUnixMs(), Level: c.GetLevel(), Knobs: maps.Clone(c.GetKnobs()), Scope: c.GetScope(),
		ForMs: c.GetForMs(), Reason: c.GetReason(), Actor: actor, CreatedAt: s.now().UnixMilli(), State: SchedulePending}
	now := s.now()
	err = s.validateSet(sd.request())
	switch {
	case err != nil:
	case sd.At <= now.UnixMilli():
		err = rpcstatus.New(codes.InvalidArgument, ReasonInvalidTime, "scheduled time %s is not in the future",
			time.UnixMilli(sd.At).UTC().Format(time.RFC3339))
	case time.UnixMilli(sd.At).Sub(now) > maxScheduleAhead:
		err = rpcstatus.New(codes.InvalidArgument, ReasonInvalidTime, "scheduled time %s is more than %s ahead",
			time.UnixMilli(sd.At).UTC().Format(time.RFC3339), maxScheduleAhead)
	}
	if err != nil {
		s.flexChanges.WithLabelValues("schedule", "invalid").Inc()
		cur, _, _ := s.current()
		s.audit(&willowv1.AuditEntry{Actor: actor, Action: "schedule", Scope: sd.Scope, Reason: sd.Reason,
			FromVersion: cur.Version, ToVersion: cur.Version, To: describeRequest(sd.request()), Error: rpcstatus.Line(err)})
		return nil, err
	}
	_, _, err = s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		pending := 0
		for _, x := range cur.Schedules {
			if x.State == SchedulePending {
				pending++
			}
		}
		if pending >= maxPendingSchedules {
			return cur, nil, rpcstatus.New(codes.FailedPrecondition, ReasonTooManySchedules, "%d changes are scheduled already: cancel some first", pending)
		}
		nd := cur
		nd.NextSched = cur.NextSched + 1
		sd.ID = fmt.Sprintf("s%d", nd.NextSched)
		nd.Schedules = append(append([]scheduleDoc(nil), cur.Schedules...), sd)
		return nd, &willowv1.AuditEntry{Actor: actor, Action: "schedule", Scope: sd.Scope, Reason: "scheduled " + sd.describe() + ": " + sd.Reason}, nil
	})
	if err != nil {
		return nil, flexStatus(err)
	}
	return sd.proto(), nil
}

// ListSchedules lists pending changes (soonest first), then the applied,
// failed and cancelled ones (latest first).
func (s *Server) ListSchedules(ctx context.Context, _ *willowv1.ListSchedulesRequest) (*willowv1.ListSchedulesResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, getFlexReadTimeout)
	defer cancel()
	if err := s.reloadFlex(rctx); err != nil {
		s.log.Warn("flex schedules: serving the local copy", "err", err)
	}
	d, _, _ := s.current()
	return &willowv1.ListSchedulesResponse{Schedules: sortedSchedules(d.Schedules)}, nil
}

func sortedSchedules(in []scheduleDoc) []*willowv1.ScheduledChange {
	l := append([]scheduleDoc(nil), in...)
	sort.SliceStable(l, func(i, j int) bool {
		pi, pj := l[i].State == SchedulePending, l[j].State == SchedulePending
		switch {
		case pi != pj:
			return pi
		case pi:
			return l[i].At < l[j].At
		}
		return l[i].DoneAt > l[j].DoneAt
	})
	out := make([]*willowv1.ScheduledChange, len(l))
	for i, x := range l {
		out[i] = x.proto()
	}
	return out
}

// CancelSchedule cancels a pending change. Errors: NOT_FOUND
// unknown_schedule, FAILED_PRECONDITION not_pending, INVALID_ARGUMENT
// missing_reason, and those of SetFlex for auth and Redis.
func (s *Server) CancelSchedule(ctx context.Context, req *willowv1.CancelScheduleRequest) (*willowv1.ScheduledChange, error) {
	actor, err := s.authorize(ctx, req.GetToken(), "schedule-cancel", "", req.GetReason())
	if err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled"
	}
	var out scheduleDoc
	_, _, err = s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		nd := cur
		nd.Schedules = append([]scheduleDoc(nil), cur.Schedules...)
		for i := range nd.Schedules {
			x := &nd.Schedules[i]
			if x.ID != req.GetId() {
				continue
			}
			if x.State != SchedulePending {
				return cur, nil, rpcstatus.New(codes.FailedPrecondition, ReasonNotPending, "scheduled change %s is %s already", x.ID, x.State)
			}
			x.State, x.DoneAt, x.Error = ScheduleCancelled, s.now().UnixMilli(), ""
			out = *x
			nd.Schedules = trimDone(nd.Schedules)
			return nd, &willowv1.AuditEntry{Actor: actor, Action: "schedule-cancel", Scope: x.Scope,
				Reason: "cancelled " + x.describe() + ": " + reason}, nil
		}
		return cur, nil, rpcstatus.New(codes.NotFound, ReasonUnknownSchedule, "no scheduled change %q (willow flex schedule list)", req.GetId())
	})
	if err != nil {
		return nil, flexStatus(err)
	}
	return out.proto(), nil
}

// trimDone keeps the pending changes and the newest keepDoneSchedules
// others.
func trimDone(l []scheduleDoc) []scheduleDoc {
	done := 0
	for _, x := range l {
		if x.State != SchedulePending {
			done++
		}
	}
	out := l[:0:0]
	for _, x := range l {
		if x.State != SchedulePending && done > keepDoneSchedules {
			done--
			continue
		}
		out = append(out, x)
	}
	return out
}

// applyDueSchedules applies the pending changes whose time has come,
// oldest first, one compare-and-set each (leader only).
func (s *Server) applyDueSchedules(ctx context.Context) error {
	d, _, _ := s.current()
	now := s.now().UnixMilli()
	var due []scheduleDoc
	for _, x := range d.Schedules {
		if x.State == SchedulePending && x.At <= now {
			due = append(due, x)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].At < due[j].At })
	for _, x := range due {
		if err := s.applySchedule(ctx, x.ID); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) applySchedule(ctx context.Context, id string) error {
	_, _, err := s.commit(ctx, func(cur flexDoc) (flexDoc, *willowv1.AuditEntry, error) {
		i := -1
		for j, x := range cur.Schedules {
			if x.ID == id && x.State == SchedulePending {
				i = j
			}
		}
		if i < 0 {
			return cur, nil, errNothingDue // applied or cancelled through another master
		}
		now := s.now().UnixMilli()
		x := cur.Schedules[i]
		req := x.request()
		reason := "scheduled " + x.ID + ": " + x.Reason
		action := "knob"
		if x.Level != "" {
			action = "set"
		}
		var nd flexDoc
		var entry *willowv1.AuditEntry
		if verr := s.validateSet(req); verr != nil {
			nd = cur
			x.State, x.Error = ScheduleFailed, rpcstatus.Line(verr)
			entry = &willowv1.AuditEntry{Actor: x.Actor, Action: action, Scope: x.Scope, Reason: reason,
				To: describeRequest(req), Error: "at apply time: " + x.Error}
		} else {
			nd = s.applyChange(cur, req, x.Actor, reason)
			x.State, x.Version = ScheduleApplied, cur.Version
			if !s.sameEffect(cur, nd) {
				x.Version++ // commit gives a change of what nodes run the next flex version
			}
			entry = &willowv1.AuditEntry{Actor: x.Actor, Action: action, Scope: x.Scope, Reason: reason}
		}
		x.DoneAt = now
		nd.Schedules = append([]scheduleDoc(nil), cur.Schedules...)
		nd.Schedules[i] = x
		nd.Schedules = trimDone(nd.Schedules)
		return nd, entry, nil
	})
	if errors.Is(err, errNothingDue) {
		return nil
	}
	return err
}
