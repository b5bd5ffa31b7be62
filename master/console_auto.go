package master

import (
	"context"
	"net/http"
	"time"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// The console's auto-flex section: GET /api/auto (role read) answers the
// auto-flex mode, the manual-override pause, the dry-run proposal, the
// last step, the rules with their signals, and the scheduled changes, as
// `willow flex auto status` and `willow flex schedule list` do.

// consoleAuto adds the auto-flex endpoint to the console's mux.
func (s *Server) consoleAuto(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/auto", s.consoleAuth(auth.RoleRead, s.apiAuto))
}

// autoView is the JSON of GET /api/auto. Times are RFC 3339 UTC, empty
// when unset.
type autoView struct {
	Mode      string         `json:"mode"` // on | off | dry-run
	Summary   string         `json:"summary"`
	Ceiling   string         `json:"ceiling"`
	Hold      string         `json:"hold"`
	Leader    string         `json:"leader,omitempty"`
	ChangedBy string         `json:"changed_by,omitempty"`
	ChangedAt string         `json:"changed_at,omitempty"`
	Paused    *autoPause     `json:"paused"` // null when not paused
	Proposal  string         `json:"proposal,omitempty"`
	ProposalT string         `json:"proposal_at,omitempty"`
	LastStep  string         `json:"last_step,omitempty"`
	LastStepT string         `json:"last_step_at,omitempty"`
	Rules     []autoRuleView `json:"rules"`
	Schedules []scheduleView `json:"schedules"`
}

type autoPause struct {
	Until  string `json:"until"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

type autoRuleView struct {
	Name     string  `json:"name"`
	Signal   string  `json:"signal"`
	Level    string  `json:"level"`
	Above    float64 `json:"above"`
	Below    float64 `json:"below"`
	Dwell    string  `json:"dwell"`
	Cooldown string  `json:"cooldown"`
	Value    float64 `json:"value"`
	State    string  `json:"state"`
	Since    string  `json:"since,omitempty"`
}

type scheduleView struct {
	ID             string `json:"id"`
	At             string `json:"at"`
	State          string `json:"state"`
	Change         string `json:"change"` // "level=blue", "image_quality=40 @region:a"
	For            string `json:"for,omitempty"`
	Actor          string `json:"actor"`
	Reason         string `json:"reason"`
	Error          string `json:"error,omitempty"`
	AppliedVersion int64  `json:"applied_version,omitempty"`
	DoneAt         string `json:"done_at,omitempty"`
}

func consoleTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func (s *Server) apiAuto(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	st, err := s.GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	l, err := s.ListSchedules(ctx, &willowv1.ListSchedulesRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	writeConsoleJSON(w, http.StatusOK, autoViewOf(st, l.GetSchedules()))
}

func autoViewOf(st *willowv1.FlexAutoStatus, scheds []*willowv1.ScheduledChange) autoView {
	v := autoView{Mode: st.GetMode(), Summary: AutoSummary(st), Ceiling: st.GetCeiling(),
		Hold: (time.Duration(st.GetHoldMs()) * time.Millisecond).String(), Leader: st.GetLeader(),
		ChangedBy: st.GetChangedBy(), ChangedAt: consoleTime(st.GetChangedAtUnixMs()),
		LastStep: st.GetLastStep(), LastStepT: consoleTime(st.GetLastStepAtUnixMs()),
		Rules: []autoRuleView{}, Schedules: []scheduleView{}}
	if st.GetMode() == AutoDryRun {
		v.Proposal, v.ProposalT = st.GetProposal(), consoleTime(st.GetProposalAtUnixMs())
	}
	if st.GetPausedUntilUnixMs() != 0 {
		v.Paused = &autoPause{Until: consoleTime(st.GetPausedUntilUnixMs()), By: st.GetPausedBy(), Reason: st.GetPausedReason()}
	}
	ms := func(x int64) string { return (time.Duration(x) * time.Millisecond).String() }
	for _, r := range st.GetRules() {
		v.Rules = append(v.Rules, autoRuleView{Name: r.GetName(), Signal: r.GetSignal(), Level: r.GetLevel(),
			Above: r.GetAbove(), Below: r.GetBelow(), Dwell: ms(r.GetDwellMs()), Cooldown: ms(r.GetCooldownMs()),
			Value: r.GetValue(), State: r.GetState(), Since: consoleTime(r.GetSinceUnixMs())})
	}
	for _, x := range scheds {
		sv := scheduleView{ID: x.GetId(), At: consoleTime(x.GetAtUnixMs()), State: x.GetState(),
			Change: describeRequest(&willowv1.SetFlexRequest{Level: x.GetLevel(), Knobs: x.GetKnobs(), Scope: x.GetScope()}),
			Actor:  x.GetActor(), Reason: x.GetReason(), Error: x.GetError(), AppliedVersion: x.GetAppliedVersion(),
			DoneAt: consoleTime(x.GetDoneAtUnixMs())}
		if x.GetForMs() > 0 {
			sv.For = ms(x.GetForMs())
		}
		v.Schedules = append(v.Schedules, sv)
	}
	return v
}
