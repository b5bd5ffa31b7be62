package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"willow/cmd/internal/daemontest"
	"willow/internal/testenv"
	willowv1 "willow/proto/willow/v1"
)

func TestMainServesFromConfigFile(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := "node:\n  id: master-7\n  grpc: 127.0.0.1:0\nmaster:\n  redis: " + r.URL +
		"\n  oncall_token: secret\n  missed_after: 2s\n  flap_memory: 1m\n  probe_timeout: 300ms\n  probe_failures: 4\n  entry_ttl: 2m\n"
	n, h := daemontest.StartWithConfig(t, run, cfg, "-admin", "127.0.0.1:0", "-console", "127.0.0.1:0")
	if n.Config().ID != "master-7" {
		t.Fatalf("node id %q, want master-7 from the config file", n.Config().ID)
	}
	conn := daemontest.Dial(t, n)
	ctx := daemontest.Context(t, 5*time.Second)
	if _, err := willowv1.NewMasterClient(conn).ListNodes(ctx, &willowv1.ListNodesRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + h["console"] + "/console")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console: %s", resp.Status)
	}
}

func TestMainRefuses(t *testing.T) {
	daemontest.Refuses(t, run, nil, []daemontest.Refusal{
		{Want: "need -redis"},
		{Args: []string{"-redis", "redis://127.0.0.1:1", "-region", "a"}, Want: "-region"}, // a master has no region
	})
	daemontest.Refuses(t, run, daemontest.Env{"WILLOW_REDIS": "redis://127.0.0.1:1"}, []daemontest.Refusal{{Args: []string{"-oncall-token", "CHANGE-ME"}, Want: "placeholder"}})
}

// TestMainAutoFlexPolicy: -auto-flex-policy (master: auto_flex_policy in
// the file) loads the policy; a missing or invalid one is refused with the
// file and the field named.
func TestMainAutoFlexPolicy(t *testing.T) {
	r := testenv.StartRedis(t)
	good := daemontest.WriteFile(t, "good.yaml", "ceiling: blue\nrules:\n  - {name: q, signal: compress_queue_p99_ms, above: 900, below: 200, dwell: 2s, cooldown: 5s, level: blue}\n")
	bad := daemontest.WriteFile(t, "bad.yaml", "rules:\n  - {name: q, signal: compress_queue_p99_ms, above: 5, below: 6, dwell: 2s, cooldown: 5s, level: blue}\n")
	args := func(policy string) []string {
		return []string{"-redis", r.URL, "-oncall-token", "t", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-auto-flex-policy", policy}
	}
	for policy, want := range map[string]string{
		bad:              "bad.yaml: auto-flex policy: rules[0].below: 6 must be under above (5)",
		bad + ".missing": "auto-flex policy: open",
	} {
		if err := daemontest.Fail(t, run, daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}, args(policy)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-auto-flex-policy %s: %v, want %q", policy, err, want)
		}
	}
	n, _ := daemontest.Start(t, run, nil, args(good)...)
	conn := daemontest.Dial(t, n)
	ctx := daemontest.Context(t, 5*time.Second)
	st, err := willowv1.NewMasterClient(conn).GetFlexAuto(ctx, &willowv1.GetFlexAutoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetCeiling() != "blue" || len(st.GetRules()) != 1 || st.GetRules()[0].GetAbove() != 900 {
		t.Fatalf("auto-flex status %v, want the policy of %s", st, good)
	}
}

func TestMainBadRedisURL(t *testing.T) {
	for _, url := range []string{"redis-cluster://", "redis-cluster://a:1/2", "localhost:6379", "redis://h:1/x"} {
		err := daemontest.Fail(t, run, nil, "-redis", url, "-oncall-token", "t", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-console", "127.0.0.1:0")
		if err == nil || !strings.Contains(err.Error(), "bad redis URL") || strings.Contains(err.Error(), "\n") {
			t.Errorf("-redis %s: %v, want a one-line bad redis URL error", url, err)
		}
	}
}

func TestConfigFile(t *testing.T) {
	daemontest.ConfigFile(t, run, "Master.WithRedis.Config.Operators")
}
