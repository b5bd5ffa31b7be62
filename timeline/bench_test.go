package timeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/timeline"
)

// BenchmarkPublishFanout publishes posts of an author with 1000
// followers, 30% of them delayed, over gRPC to a real redis-server.
func BenchmarkPublishFanout(b *testing.B) {
	rdb := testenv.StartRedis(b).Client(b)
	n, err := node.New(node.Config{ID: "tl-bench", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := timeline.New(timeline.Config{}, timeline.Deps{Node: n, Redis: rdb}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n.Run(ctx) }()
	n.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"timeline_delay_ratio": "0.3", "timeline_release_per_s": "0"}})
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewTimelineClient(conn)
	const followers = 1000
	members := make([]any, followers)
	for i := range members {
		members[i] = fmt.Sprintf("user-%d", i)
	}
	if err := rdb.SAdd(ctx, "willow:tl:f:star", members...).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "star", PostId: fmt.Sprint(i), MediaIds: []string{"s.a.n1.k"}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*followers)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkPoll reads a 100-item page of a full inbox.
func BenchmarkPoll(b *testing.B) {
	rdb := testenv.StartRedis(b).Client(b)
	n, err := node.New(node.Config{ID: "tl-bench", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := timeline.New(timeline.Config{}, timeline.Deps{Node: n, Redis: rdb}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n.Run(ctx) }()
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewTimelineClient(conn)
	for i := range 200 {
		if _, err := c.Publish(ctx, &willowv1.PublishRequest{Author: "me", PostId: fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		r, err := c.Poll(ctx, &willowv1.PollRequest{User: "me", Cursor: "50", Limit: 100})
		if err != nil || len(r.GetItems()) != 100 {
			b.Fatal(err, len(r.GetItems()))
		}
	}
}
