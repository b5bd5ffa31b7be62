package main

import (
	"testing"
	"time"

	"willow/cmd/internal/daemontest"
	willowv1 "willow/proto/willow/v1"
)

func TestRunFromConfigFile(t *testing.T) {
	n, _, r := daemontest.StartOnRedis(t, run, "node:\n  id: tl-9\n  region: b\ntimeline:\n  key_prefix: \"t9:\"\n  max_inbox: 5\n  idle_interval: 50ms\n")
	if n.Config().ID != "tl-9" || n.Config().Region != "b" {
		t.Errorf("node config %+v", n.Config())
	}
	conn := daemontest.Dial(t, n)
	ctx := daemontest.Context(t, 30*time.Second)
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
	daemontest.Refuses(t, run, daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}, []daemontest.Refusal{
		{Args: []string{"-redis", "redis://127.0.0.1:1"}, Want: "need -region"},
		{Args: []string{"-region", "a"}, Want: "need -redis"},
		{Args: []string{"-region", "a", "extra"}, Want: "unexpected argument"},
	})
}

func TestConfigFile(t *testing.T) {
	daemontest.ConfigFile(t, run)
}
