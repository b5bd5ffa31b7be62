package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestRunFromConfigFile(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := filepath.Join(t.TempDir(), "timeline.yaml")
	yaml := "node:\n  id: tl-9\n  region: b\ntimeline:\n  redis: " + r.URL + "\n  key_prefix: \"t9:\"\n  max_inbox: 5\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := make(chan *node.Node, 1)
	var stderr bytes.Buffer
	m := &Main{Stderr: &stderr, Getenv: func(string) string { return "" }, Ready: func(n *node.Node) { ready <- n }}
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx, []string{"-config", cfg, "-cluster-secret", "test-secret"}) }()
	var n *node.Node
	select {
	case n = <-ready:
	case err := <-errc:
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if n.Config().ID != "tl-9" || n.Config().Region != "b" {
		t.Errorf("node config %+v", n.Config())
	}
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: "test-secret", ID: "test-1", Role: "upload"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewTimelineClient(conn)
	for i := range 7 {
		if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "a", PostId: string(rune('0' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	// max_inbox 5 applies and keys carry the prefix.
	p, err := c.Poll(ctx, &willowv1.PollRequest{User: "a"})
	if err != nil || len(p.GetItems()) != 5 {
		t.Fatalf("poll: %v %v", p, err)
	}
	if n, _ := r.Client(t).Exists(ctx, "t9:in:{a}").Result(); n != 1 {
		t.Errorf("key t9:in:{a} missing")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run returned %v", err)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-redis", "redis://127.0.0.1:1"}, "need -region"},
		{[]string{"-region", "a"}, "need -redis"},
		{[]string{"-region", "a", "extra"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			m := &Main{Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
			err := m.Run(context.Background(), tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}
