package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/cmd/internal/daemontest"
	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestRunFromConfigFile(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := daemontest.WriteFile(t, "timeline.yaml", "node:\n  id: tl-9\n  region: b\ntimeline:\n  redis: "+r.URL+"\n  key_prefix: \"t9:\"\n  max_inbox: 5\n  idle_interval: 50ms\n")
	n, _ := daemontest.Start(t, run, nil, "-config", cfg)
	if n.Config().ID != "tl-9" || n.Config().Region != "b" {
		t.Errorf("node config %+v", n.Config())
	}
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: daemontest.ClusterSecret, ID: "test-1", Role: "upload"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
}

func TestBadFlags(t *testing.T) {
	env := daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis", "redis://127.0.0.1:1"}, "need -region"},
		{[]string{"-region", "a"}, "need -redis"},
		{[]string{"-region", "a", "extra"}, "unexpected argument"},
	} {
		if err := daemontest.Fail(t, run, env, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	daemontest.RoundTrip(t, &file{}, daemontest.NodeUnset...)
	daemontest.ConfigMap(t, "timeline", &file{})
}
