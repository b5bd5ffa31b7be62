package timeline_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/timeline"
)

// TestShedClassesAreWhatTheShedderUses: the classes the timeline declares
// next to its code (timeline.ShedClasses) are the ones its node's shedder
// applies to every Timeline method, and they act: with every user of a
// business shed, Publish is rejected shed_ratio while Stats (Exempt)
// answers.
func TestShedClassesAreWhatTheShedderUses(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	n, err := node.New(node.Config{ID: "tl-shed-1", Role: "timeline", Region: "a", Logger: slog.New(slog.DiscardHandler), Shed: &shedding.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := timeline.New(timeline.Config{}, timeline.Deps{Node: n, Redis: rdb}); err != nil {
		t.Fatal(err)
	}
	declared, sh := timeline.ShedClasses(), n.Shedder()
	for _, m := range willowv1.Timeline_ServiceDesc.Methods {
		full := "/" + willowv1.Timeline_ServiceDesc.ServiceName + "/" + m.MethodName
		if got, want := sh.Class(full), declared[full]; got != want {
			t.Errorf("%s: shedder applies %v, timeline declares %v", full, got, want)
		}
	}
	if sh.Class(willowv1.Timeline_Stats_FullMethodName) != shedding.Exempt {
		t.Fatalf("Stats is %v, want exempt", sh.Class(willowv1.Timeline_Stats_FullMethodName))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _ = n.Run(ctx) }()
	conn, err := node.Dial(n.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewTimelineClient(conn)
	n.ApplyFlex(&willowv1.FlexState{Version: 1, Knobs: map[string]string{"shed_ratio.moments": "1"}})
	rctx := shedding.WithRequest(ctx, "moments", "alice")
	eventually := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Publish(rctx, &willowv1.PublishRequest{Author: "alice", PostId: "p1"})
		if status.Code(err) == codes.ResourceExhausted && rpcstatus.Reason(err) == shedding.ReasonShedRatio {
			break
		}
		if time.Now().After(eventually) {
			t.Fatalf("Publish with its business shed: %v, want RESOURCE_EXHAUSTED shed_ratio", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Stats(rctx, &willowv1.TimelineStatsRequest{}); err != nil {
		t.Fatalf("Stats while the business is shed: %v", err)
	}
}
