package master

import (
	"time"

	willowv1 "willow/proto/willow/v1"
)

// AutoView is the one JSON shape of the auto-flex state: the console's
// GET /api/auto, `willow flex auto status --json` and the "auto" of
// `willow flex status --json`. Times are RFC 3339 UTC (empty when unset),
// durations Go durations ("30m0s").
type AutoView struct {
	Mode       string             `json:"mode"` // on | off | dry-run
	Summary    string             `json:"summary"`
	Ceiling    string             `json:"ceiling"`
	Hold       string             `json:"hold"` // the manual-override pause length
	Leader     string             `json:"leader,omitempty"`
	ChangedBy  string             `json:"changed_by,omitempty"`
	ChangedAt  string             `json:"changed_at,omitempty"`
	Paused     *AutoPause         `json:"paused"` // null when not paused
	Proposal   string             `json:"proposal,omitempty"`
	ProposalAt string             `json:"proposal_at,omitempty"`
	LastStep   string             `json:"last_step,omitempty"`
	LastStepAt string             `json:"last_step_at,omitempty"`
	Signals    map[string]float64 `json:"signals"`
	Rules      []AutoRuleView     `json:"rules"`
	Schedules  []ScheduleView     `json:"schedules"`
}

// AutoPause is a manual-override pause.
type AutoPause struct {
	Until  string `json:"until"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// AutoRuleView is one policy rule with its signal's last value and state.
type AutoRuleView struct {
	Name       string  `json:"name"`
	Signal     string  `json:"signal"`
	Level      string  `json:"level"`
	Above      float64 `json:"above"`
	Below      float64 `json:"below"`
	Dwell      string  `json:"dwell"`
	Cooldown   string  `json:"cooldown"`
	HoldSignal string  `json:"hold_signal,omitempty"`
	HoldBelow  float64 `json:"hold_below,omitempty"`
	HoldValue  float64 `json:"hold_value,omitempty"`
	Value      float64 `json:"value"`
	State      string  `json:"state"`
	Since      string  `json:"since,omitempty"`
}

// ScheduleView is one scheduled change.
type ScheduleView struct {
	ID             string            `json:"id"`
	At             string            `json:"at"`
	State          string            `json:"state"`
	Change         string            `json:"change"` // "level=blue", "image_quality=40 @region:a"
	Level          string            `json:"level,omitempty"`
	Knobs          map[string]string `json:"knobs,omitempty"`
	Scope          string            `json:"scope,omitempty"`
	For            string            `json:"for,omitempty"`
	Actor          string            `json:"actor"`
	Reason         string            `json:"reason"`
	Error          string            `json:"error,omitempty"`
	AppliedVersion int64             `json:"applied_version,omitempty"`
	DoneAt         string            `json:"done_at,omitempty"`
}

func viewTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func viewDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// NewAutoView renders the auto-flex state and the scheduled changes.
func NewAutoView(st *willowv1.FlexAutoStatus, scheds []*willowv1.ScheduledChange) AutoView {
	v := AutoView{Mode: st.GetMode(), Summary: AutoSummary(st), Ceiling: st.GetCeiling(),
		Hold: viewDuration(st.GetHoldMs()), Leader: st.GetLeader(),
		ChangedBy: st.GetChangedBy(), ChangedAt: viewTime(st.GetChangedAtUnixMs()),
		LastStep: st.GetLastStep(), LastStepAt: viewTime(st.GetLastStepAtUnixMs()),
		Signals: st.GetSignals(), Rules: []AutoRuleView{}, Schedules: NewScheduleViews(scheds)}
	if v.Signals == nil {
		v.Signals = map[string]float64{}
	}
	if st.GetMode() == AutoDryRun {
		v.Proposal, v.ProposalAt = st.GetProposal(), viewTime(st.GetProposalAtUnixMs())
	}
	if st.GetPausedUntilUnixMs() != 0 {
		v.Paused = &AutoPause{Until: viewTime(st.GetPausedUntilUnixMs()), By: st.GetPausedBy(), Reason: st.GetPausedReason()}
	}
	for _, r := range st.GetRules() {
		v.Rules = append(v.Rules, AutoRuleView{Name: r.GetName(), Signal: r.GetSignal(), Level: r.GetLevel(),
			Above: r.GetAbove(), Below: r.GetBelow(), Dwell: viewDuration(r.GetDwellMs()), Cooldown: viewDuration(r.GetCooldownMs()),
			HoldSignal: r.GetHoldSignal(), HoldBelow: r.GetHoldBelow(), HoldValue: r.GetHoldValue(),
			Value: r.GetValue(), State: r.GetState(), Since: viewTime(r.GetSinceUnixMs())})
	}
	return v
}

// NewScheduleViews renders scheduled changes (never nil).
func NewScheduleViews(l []*willowv1.ScheduledChange) []ScheduleView {
	out := make([]ScheduleView, 0, len(l))
	for _, x := range l {
		sv := ScheduleView{ID: x.GetId(), At: viewTime(x.GetAtUnixMs()), State: x.GetState(),
			Change: describeRequest(&willowv1.SetFlexRequest{Level: x.GetLevel(), Knobs: x.GetKnobs(), Scope: x.GetScope()}),
			Level:  x.GetLevel(), Knobs: x.GetKnobs(), Scope: x.GetScope(),
			Actor: x.GetActor(), Reason: x.GetReason(), Error: x.GetError(), AppliedVersion: x.GetAppliedVersion(),
			DoneAt: viewTime(x.GetDoneAtUnixMs())}
		if x.GetForMs() > 0 {
			sv.For = viewDuration(x.GetForMs())
		}
		out = append(out, sv)
	}
	return out
}
