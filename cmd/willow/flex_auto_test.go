package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"willow/master"
)

func TestFlexAutoAndScheduleCLI(t *testing.T) {
	addr := startFlexMaster(t, "s3cret")
	env := map[string]string{"WILLOW_MASTER": addr}
	tok := map[string]string{"WILLOW_MASTER": addr, "WILLOW_ONCALL_TOKEN": "s3cret"}
	for _, tt := range []struct {
		env            map[string]string
		args           []string
		code           int
		stdout, stderr string
	}{
		{env, []string{"flex", "auto", "status"}, 0, "auto-flex off (ceiling yellow, manual hold 30m0s", ""},
		{env, []string{"flex", "auto", "status"}, 0, "no data", ""},
		{env, []string{"flex", "auto", "on"}, 1, "", "UNAUTHENTICATED no_credentials"},
		{tok, []string{"flex", "auto", "sideways"}, 2, "", `unknown flex auto command "sideways"`},
		{tok, []string{"flex", "auto", "dry-run", "--reason", "try it"}, 0, "auto-flex dry-run", ""},
		{tok, []string{"flex", "set", "yellow", "--reason", "peak"}, 0, "level yellow", ""},
		{env, []string{"flex", "status"}, 0, "paused until", ""},
		{tok, []string{"flex", "schedule", "set", "blue", "--reason", "x"}, 2, "", "needs --at"},
		{tok, []string{"flex", "schedule", "--at", "tomorrow", "set", "blue", "--reason", "x"}, 2, "", "is not RFC 3339"},
		{tok, []string{"flex", "schedule", "--at", "+2h", "knob", "image_quality=5", "--reason", "x"}, 1, "", "INVALID_ARGUMENT invalid_knob"},
		{tok, []string{"flex", "schedule", "--at", "2020-01-01T00:00:00Z", "set", "blue", "--reason", "x"}, 1, "", "INVALID_ARGUMENT invalid_time"},
		{tok, []string{"flex", "schedule", "--at", "+2h", "knob", "video_bitrate_kbps=1200", "--for", "10h", "--reason", "NYE: arm bitrate"}, 0, "scheduled s1 pending at", ""},
		{env, []string{"flex", "schedule", "list"}, 0, "s1 pending at", ""},
		{env, []string{"flex", "status"}, 0, "video_bitrate_kbps=1200 for 10h0m0s (oncall: NYE: arm bitrate)", ""},
		{tok, []string{"flex", "schedule", "cancel", "s9"}, 1, "", "NOT_FOUND unknown_schedule"},
		{tok, []string{"flex", "schedule", "cancel", "s1", "--reason", "plan changed"}, 0, "cancelled s1 cancelled", ""},
		{env, []string{"flex", "history"}, 0, "schedule-cancel", ""},
	} {
		r := runFlexCLI(t, tt.env, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
			t.Fatalf("willow %s = %+v, want exit %d, stdout with %q, stderr with %q", strings.Join(tt.args, " "), r, tt.code, tt.stdout, tt.stderr)
		}
	}
	r := runFlexCLI(t, env, "flex", "status", "--json")
	var st struct {
		Level string `json:"level"`
		Auto  struct {
			Mode   string `json:"mode"`
			Paused struct {
				Until string `json:"until"`
				By    string `json:"by"`
			} `json:"paused"`
		} `json:"auto"`
		Schedules []any `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json %+v: %v", r, err)
	}
	until, err := time.Parse(time.RFC3339, st.Auto.Paused.Until)
	if st.Level != "yellow" || st.Auto.Mode != "dry-run" || st.Auto.Paused.By != "oncall" || err != nil ||
		until.Before(time.Now().Add(29*time.Minute)) || len(st.Schedules) != 0 {
		t.Fatalf("status --json %s", r.stdout)
	}
	// flex auto status --json is the console's /api/auto shape.
	r = runFlexCLI(t, env, "flex", "auto", "status", "--json")
	var av master.AutoView
	if err := json.Unmarshal([]byte(r.stdout), &av); err != nil || r.code != 0 {
		t.Fatalf("auto status --json %+v: %v", r, err)
	}
	if av.Mode != "dry-run" || av.Hold != "30m0s" || av.Paused == nil || av.Paused.By != "oncall" || len(av.Rules) == 0 ||
		len(av.Schedules) != 1 || av.Schedules[0].ID != "s1" || av.Schedules[0].State != "cancelled" ||
		av.Schedules[0].Change != "video_bitrate_kbps=1200" || av.Schedules[0].For != "10h0m0s" {
		t.Fatalf("auto status --json %s", r.stdout)
	}
	if at, err := parseAt("15:30", time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)); err != nil || !at.Equal(time.Date(2026, 12, 2, 15, 30, 0, 0, time.UTC)) {
		t.Fatalf("parseAt 15:30 after 16:00 = %v, %v", at, err)
	}
}
