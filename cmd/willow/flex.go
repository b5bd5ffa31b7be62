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
	conn, err := g.dialMaster()
	if err != nil {
		return err
	}
	defer conn.Close()
	mc := willowv1.NewMasterClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

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
			return writeFlexJSON(m.Stdout, flex.AuditRecords(resp.GetEntries()))
		}
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tRESULT\tVERSION\tCHANGE\tREASON")
		for _, e := range resp.GetEntries() {
			result, change := "accepted", e.GetTo()
			if !e.GetAccepted() {
				result, change = "DENIED", e.GetError()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tv%d->v%d\t%s\t%s\n", time.UnixMilli(e.GetAtUnixMs()).UTC().Format(time.RFC3339),
				e.GetActor(), e.GetAction(), result, e.GetFromVersion(), e.GetToVersion(), change, e.GetReason())
		}
		return tw.Flush()
	}
	return usagef("unknown flex command %q\n%s", sub, flexUsage)
}

func writeFlexJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
	if asJSON {
		return writeFlexJSON(w, struct {
			Flex    flex.Status   `json:"flex"`
			Changes []flex.Change `json:"changes"`
			DryRun  bool          `json:"dry_run,omitempty"`
		}{flex.NewStatus(resp.GetFlex()), diff, dryRun})
	}
	st := resp.GetFlex()
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
