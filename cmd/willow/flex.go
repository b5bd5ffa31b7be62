package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"willow/flex"
	willowv1 "willow/proto/willow/v1"
)

const flexUsage = `usage:
  willow flex status [--json]
  willow flex set LEVEL --reason R [--for 2h] [--scope region:a|group:NAME] [--expect VERSION] [--dry-run]
  willow flex knob NAME=VALUE... --reason R [--for D] [--scope S] [--expect VERSION] [--dry-run]
  willow flex history [--json] [--limit N]
  willow flex rollback --reason R [--expect VERSION]
  willow flex auto status|on|off|dry-run           (see willow flex auto --help)
  willow flex schedule --at TIME (set LEVEL | knob K=V) --reason R [--for D] | list | cancel ID
levels: normal, blue, yellow, red; per-business knobs are shed_ratio.BUSINESS`

// cmdFlex is `willow flex`: the on-call view and control of the flex state.
func cmdFlex(ctx context.Context, m *Main, args []string) error {
	if len(args) == 0 {
		return usagef("%s", flexUsage)
	}
	sub, args := args[0], args[1:]
	if sub == "auto" || sub == "schedule" {
		return cmdFlexAuto(ctx, m, sub, args) // flex_auto.go
	}
	fs, g := m.newFlags("flex " + sub)
	reason := fs.String("reason", "", "why (required for changes; kept in the audit log)")
	forDur := fs.Duration("for", 0, "revert the change by itself after this long (e.g. 2h)")
	scope := fs.String("scope", "", "apply to one region (region:a) or node group (group:NAME) only")
	expect := fs.Int64("expect", 0, "compare-and-set: fail if the flex version is no longer this")
	dryRun := fs.Bool("dry-run", false, "validate and show the diff without applying")
	actor := fs.String("actor", "", "who is changing it (default $USER)")
	limit := fs.Int("limit", 20, "history entries to show")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *actor == "" {
		*actor = m.Getenv("USER")
	}
	if *actor == "" {
		*actor = m.Getenv("LOGNAME")
	}
	mc, ctx, done, err := g.masterClient(ctx)
	if err != nil {
		return err
	}
	defer done()

	switch sub {
	case "status":
		if len(pos) != 0 {
			return usagef("flex status takes no arguments")
		}
		st, err := mc.GetFlex(ctx, &willowv1.GetFlexRequest{})
		if err != nil {
			return err
		}
		auto, pending, err := flexStatusExtras(ctx, mc)
		if err != nil {
			return err
		}
		return printFlexStatus(m.Stdout, g.json, st, auto, pending)

	case "set", "knob":
		req := &willowv1.SetFlexRequest{Token: g.oncallToken(), ExpectedVersion: *expect, Scope: *scope,
			Actor: *actor, Reason: *reason, ForMs: forDur.Milliseconds(), DryRun: *dryRun}
		if *forDur < 0 {
			req.ForMs = min(forDur.Milliseconds(), -1)
		}
		if sub == "set" {
			if len(pos) != 1 {
				return usagef("flex set takes one LEVEL (normal, blue, yellow, red)")
			}
			req.Level = pos[0]
		} else {
			if len(pos) == 0 {
				return usagef("flex knob needs NAME=VALUE arguments")
			}
			req.Knobs = map[string]string{}
			for _, kv := range pos {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("flex knob: %q is not NAME=VALUE", kv)
				}
				req.Knobs[k] = v
			}
		}
		if *reason == "" {
			return usagef("flex %s needs --reason", sub)
		}
		resp, err := mc.SetFlex(ctx, req)
		if err != nil {
			return err
		}
		return printFlexChange(m.Stdout, g.json, resp, *dryRun)

	case "rollback":
		if len(pos) != 0 {
			return usagef("flex rollback takes no arguments")
		}
		if *reason == "" {
			return usagef("flex rollback needs --reason")
		}
		resp, err := mc.RollbackFlex(ctx, &willowv1.RollbackFlexRequest{Token: g.oncallToken(),
			ExpectedVersion: *expect, Actor: *actor, Reason: *reason})
		if err != nil {
			return err
		}
		return printFlexChange(m.Stdout, g.json, resp, false)

	case "history":
		resp, err := mc.FlexHistory(ctx, &willowv1.FlexHistoryRequest{Limit: int32(*limit)})
		if err != nil {
			return err
		}
		if g.json {
			// A listing: one object per line.
			enc := json.NewEncoder(m.Stdout)
			for _, r := range flex.AuditRecords(resp.GetEntries()) {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}
		return printHistory(m.Stdout, resp.GetEntries())
	}
	return usagef("unknown flex command %q\n%s", sub, flexUsage)
}

// writeFlexJSON writes a single answer: one JSON object on one line.
func writeFlexJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// historyWidth is the width the history table keeps to: CHANGE and REASON
// wrap onto continuation lines instead of widening it.
const (
	historyWidth  = 100
	historyColumn = 30 // width of the wrapped CHANGE and REASON columns
)

// printHistory writes the audit log as a table whose long changes and
// reasons wrap within their columns.
func printHistory(w io.Writer, entries []*willowv1.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tRESULT\tVERSION\tCHANGE\tREASON")
	for _, e := range entries {
		result, change := "accepted", e.GetTo()
		if !e.GetAccepted() {
			result, change = "DENIED", e.GetError()
		}
		cs, rs := wrap(change, historyColumn), wrap(e.GetReason(), historyColumn)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tv%d->v%d\t%s\t%s\n", time.UnixMilli(e.GetAtUnixMs()).UTC().Format("2006-01-02 15:04:05"),
			e.GetActor(), e.GetAction(), result, e.GetFromVersion(), e.GetToVersion(), at(cs, 0), at(rs, 0))
		for i := 1; i < max(len(cs), len(rs)); i++ {
			fmt.Fprintf(tw, "\t\t\t\t\t%s\t%s\n", at(cs, i), at(rs, i))
		}
	}
	return tw.Flush()
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}

// wrap breaks s into lines of at most width runes, at spaces where it can
// and inside a word longer than width.
func wrap(s string, width int) []string {
	var lines []string
	var cur []rune
	for _, word := range strings.Fields(s) {
		rw := []rune(word)
		for len(rw) > width {
			if len(cur) > 0 {
				lines, cur = append(lines, string(cur)), nil
			}
			lines, rw = append(lines, string(rw[:width])), rw[width:]
		}
		switch {
		case len(cur) == 0:
			cur = rw
		case len(cur)+1+len(rw) <= width:
			cur = append(append(cur, ' '), rw...)
		default:
			lines, cur = append(lines, string(cur)), rw
		}
	}
	if len(cur) > 0 || len(lines) == 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

// printFlex writes the state for humans: level, version, expiry, knobs,
// then each scope.
func printFlex(w io.Writer, st *willowv1.FlexState) {
	s := flex.NewStatus(st)
	fmt.Fprintf(w, "level %s, version %d", s.Level, s.Version)
	if s.ExpiresAt != nil {
		fmt.Fprintf(w, ", expires %s", *s.ExpiresAt)
	}
	fmt.Fprintln(w)
	if s.Actor != "" {
		fmt.Fprintf(w, "changed by %s: %s\n", s.Actor, s.Reason)
	}
	printFlexKnobs(w, "  ", s.Knobs)
	for _, sc := range s.Scopes {
		lvl := sc.Level
		if lvl == "" {
			lvl = "(global level)"
		}
		fmt.Fprintf(w, "scope %s: level %s\n", sc.Scope, lvl)
		printFlexKnobs(w, "  ", sc.Knobs)
	}
}

func printFlexKnobs(w io.Writer, indent string, knobs map[string]string) {
	names := make([]string, 0, len(knobs))
	for k := range knobs {
		names = append(names, k)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range names {
		fmt.Fprintf(tw, "%s%s\t%s\n", indent, k, knobs[k])
	}
	tw.Flush()
}

// printFlexChange writes the outcome of a change: new version and the diff.
func printFlexChange(w io.Writer, asJSON bool, resp *willowv1.SetFlexResponse, dryRun bool) error {
	diff := flex.Diff(resp.GetPrevious(), resp.GetFlex())
	st := resp.GetFlex()
	// The master answers a change to the state already in force without
	// a new version.
	unchanged := st.GetVersion() == resp.GetPrevious().GetVersion()
	if asJSON {
		return writeFlexJSON(w, struct {
			Flex      flex.Status   `json:"flex"`
			Changes   []flex.Change `json:"changes"`
			DryRun    bool          `json:"dry_run,omitempty"`
			Unchanged bool          `json:"unchanged,omitempty"`
		}{flex.NewStatus(st), diff, dryRun, unchanged})
	}
	if unchanged {
		fmt.Fprintf(w, "flex already at level %s, version %d: nothing changed\n", st.GetLevel(), st.GetVersion())
		return nil
	}
	if dryRun {
		fmt.Fprintf(w, "dry run: would change version %d:\n", resp.GetPrevious().GetVersion())
	} else {
		fmt.Fprintf(w, "flex version %d -> %d, level %s", resp.GetPrevious().GetVersion(), st.GetVersion(), st.GetLevel())
		if ms := st.GetExpiresAtUnixMs(); ms > 0 {
			fmt.Fprintf(w, ", expires %s", time.UnixMilli(ms).UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	if len(diff) == 0 {
		fmt.Fprintln(w, "  (no knob changed)")
	}
	for _, c := range diff {
		fmt.Fprintf(w, "  %s\n", c)
	}
	return nil
}
