package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"willow/flex"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
)

// startFlexMaster runs a master on a real redis-server and returns its
// address.
func startFlexMaster(t *testing.T, token string) string {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := master.New(master.Config{OncallToken: token}, master.Deps{Node: n, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.Run(ctx)
	go s.Run(ctx)
	return n.Addr()
}

type flexCLIResult struct {
	code           int
	stdout, stderr string
}

func runFlexCLI(t *testing.T, env map[string]string, args ...string) flexCLIResult {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := m.Run(ctx, args)
	return flexCLIResult{code, out.String(), errb.String()}
}

func TestFlexCLI(t *testing.T) {
	addr := startFlexMaster(t, "s3cret")
	env := map[string]string{"WILLOW_MASTER": addr, "USER": "alice"}
	withToken := map[string]string{"WILLOW_MASTER": addr, "USER": "alice", "WILLOW_ONCALL_TOKEN": "s3cret"}

	statusJSON := func() map[string]any {
		t.Helper()
		r := runFlexCLI(t, env, "flex", "status", "--json")
		if r.code != 0 {
			t.Fatalf("status: %+v", r)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("status --json output %q: %v", r.stdout, err)
		}
		return v
	}
	st := statusJSON()
	if st["version"] != 1.0 || st["level"] != "normal" || st["knobs"].(map[string]any)["image_codec"] != "heic" || st["expires_at"] != nil {
		t.Fatalf("initial status = %v", st)
	}

	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"no token", env, []string{"flex", "set", "red", "--reason", "x"}, 1, "", "UNAUTHENTICATED no_credentials"},
		{"wrong token", env, []string{"flex", "set", "red", "--reason", "x", "--token", "guess"}, 1, "", "UNAUTHENTICATED bad_credentials"},
		{"no reason", withToken, []string{"flex", "set", "red"}, 2, "", "needs --reason"},
		{"bad quality", withToken, []string{"flex", "knob", "image_quality=5", "--reason", "x"}, 1, "", `INVALID_ARGUMENT invalid_knob: knob image_quality="5": allowed an integer in [10,95]`},
		{"bad ratio", withToken, []string{"flex", "knob", "shed_ratio.moments=1.5", "--reason", "x"}, 1, "", "shed_ratio.moments"},
		{"unknown business", withToken, []string{"flex", "knob", "shed_ratio.games=0.5", "--reason", "x"}, 1, "", "unknown_business"},
		{"past expiry", withToken, []string{"flex", "set", "blue", "--reason", "x", "--for", "-1h"}, 1, "", "invalid_expiry"},
		{"not NAME=VALUE", withToken, []string{"flex", "knob", "image_quality", "--reason", "x"}, 2, "", "NAME=VALUE"},
		{"dry run", withToken, []string{"flex", "set", "blue", "--reason", "x", "--dry-run"}, 0, "image_codec: heic -> jpeg", ""},
		{"scoped yellow", withToken, []string{"flex", "set", "yellow", "--reason", "staged", "--for", "2h", "--scope", "region:a"}, 0, "region:a retries: on -> off", ""},
		{"knobs", withToken, []string{"flex", "knob", "shed_ratio.prefetch=0.5", "image_quality=45", "--reason", "cpu"}, 0, fmt.Sprintf("image_quality: %d -> 45", flex.DefaultImageQuality), ""},
		{"stale expect", withToken, []string{"flex", "set", "red", "--reason", "x", "--expect", "2"}, 1, "", "ABORTED version_conflict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runFlexCLI(t, tt.env, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("willow %s = %+v, want exit %d, stdout with %q, stderr with %q", strings.Join(tt.args, " "), r, tt.code, tt.stdout, tt.stderr)
			}
		})
	}

	st = statusJSON()
	knobs := st["knobs"].(map[string]any)
	scopes := st["scopes"].([]any)
	if st["version"] != 3.0 || st["level"] != "normal" || knobs["image_quality"] != "45" || knobs["shed_ratio.prefetch"] != "0.5" ||
		st["expires_at"] == nil || len(scopes) != 1 || scopes[0].(map[string]any)["scope"] != "region:a" {
		t.Fatalf("status after changes = %v", st)
	}
	if r := runFlexCLI(t, env, "flex", "status"); r.code != 0 || !strings.Contains(r.stdout, "scope region:a: level yellow") {
		t.Fatalf("status: %+v", r)
	}

	r := runFlexCLI(t, withToken, "flex", "rollback", "--reason", "oops")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("image_quality: 45 -> %d", flex.DefaultImageQuality)) {
		t.Fatalf("rollback: %+v", r)
	}

	r = runFlexCLI(t, env, "flex", "history", "--json")
	if r.code != 0 {
		t.Fatalf("history --json: %+v", r)
	}
	// A listing: one JSON object per line.
	var hist []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("history --json line %q: %v", line, err)
		}
		hist = append(hist, e)
	}
	var accepted, denied int
	for _, e := range hist {
		if e["accepted"] == true {
			accepted++
		} else {
			denied++
		}
	}
	if accepted != 4 || denied < 6 || hist[0]["action"] != "rollback" || hist[0]["actor"] != "oncall" {
		// The actor is the token's identity (this master's legacy shared
		// token is the identity "oncall"), never a self-declared one.
		t.Fatalf("history: %d accepted, %d denied: %v", accepted, denied, hist)
	}
	if r := runFlexCLI(t, env, "flex", "history"); r.code != 0 || !strings.Contains(r.stdout, "DENIED") {
		t.Fatalf("history: %+v", r)
	}

	// Setting the level in force changes nothing: no new version, says so.
	if r := runFlexCLI(t, withToken, "flex", "set", "normal", "--reason", "clear the scope"); r.code != 0 || !strings.Contains(r.stdout, "region:a level: yellow -> normal") {
		t.Fatalf("set normal: %+v", r)
	}
	before := statusJSON()["version"]
	r = runFlexCLI(t, withToken, "flex", "set", "normal", "--reason", "again")
	if r.code != 0 || !strings.Contains(r.stdout, "already at level normal") || !strings.Contains(r.stdout, "nothing changed") {
		t.Fatalf("set normal at normal: %+v", r)
	}
	r = runFlexCLI(t, withToken, "flex", "set", "normal", "--reason", "again", "--json")
	var ch map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &ch); err != nil || ch["unchanged"] != true || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("set normal --json: %+v (%v)", r, err)
	}
	if after := statusJSON()["version"]; after != before {
		t.Fatalf("version %v -> %v after a no-op set", before, after)
	}

	// Global flags after the command and its subcommand, as kubectl takes
	// them.
	for _, args := range [][]string{
		{"flex", "--master", addr, "status", "--json"},
		{"--master", addr, "--json", "flex", "status"},
		{"flex", "status", "--master=" + addr, "--json"},
	} {
		r := runFlexCLI(t, nil, args...)
		var v map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v["level"] != "normal" {
			t.Errorf("willow %s: %+v", strings.Join(args, " "), r)
		}
	}

	// A long reason wraps in the history table instead of widening it.
	long := strings.Repeat("the upload fleet in region a is saturated and we shed prefetch ", 4)
	if r := runFlexCLI(t, withToken, "flex", "knob", "shed_ratio.prefetch=0.25", "--reason", long); r.code != 0 {
		t.Fatalf("knob: %+v", r)
	}
	r = runFlexCLI(t, env, "flex", "history", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "saturated") {
		t.Fatalf("history: %+v", r)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if len(line) > 130 {
			t.Errorf("history line of %d columns: %q", len(line), line)
		}
	}
}
