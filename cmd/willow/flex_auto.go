package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/flex"
	"willow/master"
	willowv1 "willow/proto/willow/v1"
)

const flexAutoUsage = `usage:
  willow flex auto status [--json]
  willow flex auto on|off|dry-run [--reason R]     (on and dry-run end a manual-override pause)
  willow flex schedule --at TIME (set LEVEL | knob NAME=VALUE...) --reason R [--for D] [--scope S]
  willow flex schedule list [--json]
  willow flex schedule cancel ID [--reason R]
TIME is RFC 3339 (2026-12-31T16:00:00Z), +DURATION (+2h) or HH:MM (the next such UTC time)`

// cmdFlexAuto is `willow flex auto` and `willow flex schedule`.
func cmdFlexAuto(ctx context.Context, m *Main, sub string, args []string) error {
	fs, g := m.newFlags("flex " + sub)
	reason := fs.String("reason", "", "why (kept in the audit log)")
	at := fs.String("at", "", "when to apply the scheduled change: RFC 3339, +DURATION or HH:MM (UTC)")
	forDur := fs.Duration("for", 0, "the scheduled change reverts by itself after this long")
	scope := fs.String("scope", "", "schedule for one region (region:a) or node group (group:NAME) only")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		if sub == "auto" {
			pos = []string{"status"}
		} else if *at == "" {
			pos = []string{"list"}
		}
	}
	mc, ctx, done, err := g.masterClient(ctx)
	if err != nil {
		return err
	}
	defer done()

	if sub == "auto" {
		switch pos[0] {
		case "status":
			if len(pos) != 1 {
				return usagef("flex auto status takes no arguments")
			}
			st, err := mc.GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
			if err != nil {
				return err
			}
			if g.json {
				return writeAutoJSON(ctx, m.Stdout, mc, st)
			}
			printAuto(m.Stdout, st, true)
			return nil
		case master.AutoOn, master.AutoOff, master.AutoDryRun:
			if len(pos) != 1 {
				return usagef("flex auto %s takes no arguments", pos[0])
			}
			st, err := mc.SetFlexAuto(ctx, &willowv1.SetFlexAutoRequest{Token: g.oncallToken(), Mode: pos[0], Reason: *reason})
			if err != nil {
				return err
			}
			if g.json {
				return writeAutoJSON(ctx, m.Stdout, mc, st)
			}
			printAuto(m.Stdout, st, false)
			return nil
		}
		return usagef("unknown flex auto command %q\n%s", pos[0], flexAutoUsage)
	}

	// schedule
	switch {
	case pos[0] == "list" && *at == "":
		resp, err := mc.ListSchedules(ctx, &willowv1.ListSchedulesRequest{})
		if err != nil {
			return err
		}
		if g.json {
			return writeFlexJSON(m.Stdout, master.NewScheduleViews(resp.GetSchedules()))
		}
		printSchedules(m.Stdout, resp.GetSchedules(), true)
		return nil
	case pos[0] == "cancel" && *at == "":
		if len(pos) != 2 {
			return usagef("flex schedule cancel takes one ID (see willow flex schedule list)")
		}
		sc, err := mc.CancelSchedule(ctx, &willowv1.CancelScheduleRequest{Token: g.oncallToken(), Id: pos[1], Reason: *reason})
		if err != nil {
			return err
		}
		if g.json {
			return writeFlexJSON(m.Stdout, master.NewScheduleViews([]*willowv1.ScheduledChange{sc})[0])
		}
		fmt.Fprintf(m.Stdout, "cancelled %s\n", describeSchedule(sc))
		return nil
	case pos[0] == "set" || pos[0] == "knob":
	default:
		return usagef("unknown flex schedule command %q\n%s", pos[0], flexAutoUsage)
	}
	if *at == "" {
		return usagef("flex schedule needs --at TIME")
	}
	when, err := parseAt(*at, time.Now())
	if err != nil {
		return usagef("--at: %v", err)
	}
	if *reason == "" {
		return usagef("flex schedule needs --reason")
	}
	if *forDur < 0 {
		return usagef("--for must be a positive duration")
	}
	c := &willowv1.ScheduledChange{AtUnixMs: when.UnixMilli(), Scope: *scope, ForMs: forDur.Milliseconds(), Reason: *reason}
	if pos[0] == "set" {
		if len(pos) != 2 {
			return usagef("flex schedule set takes one LEVEL (normal, blue, yellow, red)")
		}
		c.Level = pos[1]
	} else {
		if len(pos) < 2 {
			return usagef("flex schedule knob needs NAME=VALUE arguments")
		}
		c.Knobs = map[string]string{}
		for _, kv := range pos[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usagef("flex schedule knob: %q is not NAME=VALUE", kv)
			}
			c.Knobs[k] = v
		}
	}
	sc, err := mc.ScheduleFlex(ctx, &willowv1.ScheduleFlexRequest{Token: g.oncallToken(), Change: c})
	if err != nil {
		return err
	}
	if g.json {
		return writeFlexJSON(m.Stdout, master.NewScheduleViews([]*willowv1.ScheduledChange{sc})[0])
	}
	fmt.Fprintf(m.Stdout, "scheduled %s\n", describeSchedule(sc))
	return nil
}

// parseAt reads --at: RFC 3339, +DURATION, or HH:MM (the next such UTC
// time after now).
func parseAt(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return time.Time{}, fmt.Errorf("%q: want +DURATION like +2h", s)
		}
		return now.Add(dur), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if hm, err := time.Parse("15:04", s); err == nil {
		u := now.UTC()
		t := time.Date(u.Year(), u.Month(), u.Day(), hm.Hour(), hm.Minute(), 0, 0, time.UTC)
		if !t.After(now) {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not RFC 3339 (2026-12-31T16:00:00Z), +DURATION or HH:MM", s)
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// describeSchedule is one line: "s3 pending at TIME: set yellow for 2h (alice: reason)".
func describeSchedule(sc *willowv1.ScheduledChange) string {
	var what []string
	if sc.GetLevel() != "" {
		what = append(what, "set "+sc.GetLevel())
	}
	keys := make([]string, 0, len(sc.GetKnobs()))
	for k := range sc.GetKnobs() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		what = append(what, k+"="+sc.GetKnobs()[k])
	}
	s := fmt.Sprintf("%s %s at %s: %s", sc.GetId(), sc.GetState(), fmtMs(sc.GetAtUnixMs()), strings.Join(what, " "))
	if sc.GetScope() != "" {
		s += " @" + sc.GetScope()
	}
	if sc.GetForMs() > 0 {
		s += fmt.Sprintf(" for %s", time.Duration(sc.GetForMs())*time.Millisecond)
	}
	s += fmt.Sprintf(" (%s: %s)", sc.GetActor(), sc.GetReason())
	if sc.GetAppliedVersion() > 0 {
		s += fmt.Sprintf(" -> v%d", sc.GetAppliedVersion())
	}
	if sc.GetError() != "" {
		s += ": " + sc.GetError()
	}
	return s
}

func printSchedules(w io.Writer, l []*willowv1.ScheduledChange, all bool) {
	n := 0
	for _, sc := range l {
		if !all && sc.GetState() != master.SchedulePending {
			continue
		}
		fmt.Fprintf(w, "  %s\n", describeSchedule(sc))
		n++
	}
	if n == 0 && all {
		fmt.Fprintln(w, "no scheduled changes")
	}
}

// printAuto writes the auto-flex state; rules adds the rule table.
func printAuto(w io.Writer, st *willowv1.FlexAutoStatus, rules bool) {
	fmt.Fprintf(w, "auto-flex %s (ceiling %s, manual hold %s", st.GetMode(), st.GetCeiling(), time.Duration(st.GetHoldMs())*time.Millisecond)
	if st.GetLeader() != "" {
		fmt.Fprintf(w, ", acting master %s", st.GetLeader())
	}
	fmt.Fprintln(w, ")")
	if st.GetPausedUntilUnixMs() != 0 {
		fmt.Fprintf(w, "  paused until %s: manual change by %s (%s)\n", fmtMs(st.GetPausedUntilUnixMs()), st.GetPausedBy(), st.GetPausedReason())
	}
	if st.GetProposal() != "" {
		fmt.Fprintf(w, "  %s (at %s)\n", st.GetProposal(), fmtMs(st.GetProposalAtUnixMs()))
	}
	if st.GetLastStep() != "" {
		fmt.Fprintf(w, "  last step at %s: %s\n", fmtMs(st.GetLastStepAtUnixMs()), st.GetLastStep())
	}
	if !rules {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSIGNAL\tVALUE\tABOVE\tBELOW\tDWELL\tCOOLDOWN\tLEVEL\tHOLD\tSTATE")
	for _, r := range st.GetRules() {
		hold := "-"
		if r.GetHoldSignal() != "" {
			hold = fmt.Sprintf("%s %g < %g", r.GetHoldSignal(), r.GetHoldValue(), r.GetHoldBelow())
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%g\t%s\t%s\t%s\t%s\t%s\n", r.GetName(), r.GetSignal(), r.GetValue(), r.GetAbove(), r.GetBelow(),
			time.Duration(r.GetDwellMs())*time.Millisecond, time.Duration(r.GetCooldownMs())*time.Millisecond, r.GetLevel(), hold, r.GetState())
	}
	tw.Flush()
}

// writeAutoJSON prints the auto-flex state with the scheduled changes in
// the console's shape (master.AutoView).
func writeAutoJSON(ctx context.Context, w io.Writer, mc willowv1.MasterClient, st *willowv1.FlexAutoStatus) error {
	l, err := mc.ListSchedules(ctx, &willowv1.ListSchedulesRequest{})
	if err != nil {
		return err
	}
	return writeFlexJSON(w, master.NewAutoView(st, l.GetSchedules()))
}

// flexStatusExtras fetches what `willow flex status` shows besides the
// flex state: auto-flex and the pending scheduled changes. A master
// without them (older) gives nil, nil.
func flexStatusExtras(ctx context.Context, mc willowv1.MasterClient) (*willowv1.FlexAutoStatus, []*willowv1.ScheduledChange, error) {
	st, err := mc.GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
	if status.Code(err) == codes.Unimplemented {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	l, err := mc.ListSchedules(ctx, &willowv1.ListSchedulesRequest{})
	if err != nil {
		return nil, nil, err
	}
	var pending []*willowv1.ScheduledChange
	for _, sc := range l.GetSchedules() {
		if sc.GetState() == master.SchedulePending {
			pending = append(pending, sc)
		}
	}
	return st, pending, nil
}

// flexStatusJSON is `willow flex status --json`: the flex state's fields,
// plus "auto" and "schedules".
type flexStatusJSON struct {
	flex.Status
	Auto      *master.AutoView      `json:"auto,omitempty"`
	Schedules []master.ScheduleView `json:"schedules"`
}

func printFlexStatus(w io.Writer, asJSON bool, st *willowv1.FlexState, auto *willowv1.FlexAutoStatus, pending []*willowv1.ScheduledChange) error {
	if asJSON {
		j := flexStatusJSON{Status: flex.NewStatus(st), Schedules: master.NewScheduleViews(pending)}
		if auto != nil {
			a := master.NewAutoView(auto, pending)
			j.Auto = &a
		}
		return writeFlexJSON(w, j)
	}
	printFlex(w, st)
	if auto != nil {
		printAuto(w, auto, false)
	}
	if len(pending) > 0 {
		fmt.Fprintln(w, "scheduled:")
		printSchedules(w, pending, false)
	}
	return nil
}
