package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/cluster"
	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/timeline"
)

// startTimeline runs a timeline service on a fresh redis-server and
// returns its address and node.
func startTimeline(t *testing.T) (string, *node.Node) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	n, err := node.New(node.Config{ID: "tl-cli", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := timeline.New(timeline.Config{}, timeline.Deps{Node: n, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = n.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return n.Addr(), n
}

func runTL(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), append([]string{"timeline"}, args...))
	return out.String(), errb.String(), code
}

func TestTimelineCLI(t *testing.T) {
	addr, n := startTimeline(t)
	cf := filepath.Join(t.TempDir(), "cluster.json")
	if err := (&cluster.File{Master: "127.0.0.1:1", Timeline: addr}).Save(cf); err != nil {
		t.Fatal(err)
	}
	// Find a follower delayed at ratio 0.5.
	held := ""
	for i := 0; held == ""; i++ {
		if u := "u" + string(rune('a'+i)); shedding.NewUserHash(nil).InRatio(u, time.Now(), 0.5) {
			held = u
		}
	}
	steps := []struct {
		args []string
		code int
		want string // substring of stdout, or of stderr when code != 0
	}{
		{[]string{"follow", "bob", "alice", "--timeline", addr}, 0, "bob follows alice"},
		{[]string{"follow", held, "alice", "--cluster", cf}, 0, "follows alice"},
		{[]string{"publish", "--cluster", cf, "alice", "p1", "s.a.n1.k1", "s.a.n1.k2"}, 0, "delivered 3 held 0"},
		{[]string{"publish", "alice", "p1", "--timeline", addr, "--json"}, 0, `"delivered":3`},
		{[]string{"poll", "bob", "--cluster", cf}, 0, "alice p1 s.a.n1.k1 s.a.n1.k2\ncursor "},
		{[]string{"poll", "bob", "--cursor", "x", "--cluster", cf}, 1, "INVALID_ARGUMENT bad_cursor"},
		{[]string{"publish", "alice", "--cluster", cf}, 2, "wrong arguments"},
		{[]string{"publish", "al ice", "p", "--cluster", cf}, 1, "INVALID_ARGUMENT bad_request"},
		{[]string{"poll", "bob"}, 2, "need --timeline"},
		{[]string{"frobnicate", "--cluster", cf}, 2, "unknown subcommand"},
		{[]string{"stats", "--cluster", cf}, 0, "held_items 0"},
		{[]string{"unfollow", "bob", "alice", "--cluster", cf}, 0, "bob no longer follows alice"},
	}
	for _, s := range steps {
		out, errs, code := runTL(t, s.args...)
		got := out
		if s.code != 0 {
			got = errs
		}
		if code != s.code || !strings.Contains(got, s.want) {
			t.Errorf("willow timeline %s: exit %d, stdout %q stderr %q; want exit %d and %q",
				strings.Join(s.args, " "), code, out, errs, s.code, s.want)
		}
	}

	// Held, then released: poll --json with the cursor from before.
	out, _, _ := runTL(t, "poll", held, "--cluster", cf, "--json")
	var p struct {
		Items  []timelineItem `json:"items"`
		Cursor string         `json:"cursor"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Items) != 1 {
		t.Fatalf("poll --json %q: %v", out, err)
	}
	n.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"timeline_delay_ratio": "0.5", "timeline_release_per_s": "0"}})
	if out, _, _ := runTL(t, "publish", "alice", "p2", "--cluster", cf); !strings.Contains(out, "delivered 1 held 1") {
		t.Errorf("publish while delayed: %q", out)
	}
	if out, _, _ := runTL(t, "poll", held, "--cursor", p.Cursor, "--cluster", cf, "--json"); !strings.Contains(out, `"items":[]`) {
		t.Errorf("held item visible: %q", out)
	}
	if out, _, _ := runTL(t, "stats", "--cluster", cf, "--json"); !strings.Contains(out, `"held_items":1`) {
		t.Errorf("stats: %q", out)
	}
}
