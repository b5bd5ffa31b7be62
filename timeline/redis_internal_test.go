package timeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/redisconn"
)

// TestSlotTags: every slot's sequence counter hashes to that slot.
func TestSlotTags(t *testing.T) {
	s := &Server{cluster: true, rk: redisKeys{prefix: "willow:tl:"}}
	for slot := range redisconn.Slots {
		if got := redisconn.Slot(s.seq(slot)); got != slot {
			t.Fatalf("slot %d's counter %q is in slot %d", slot, s.seq(slot), got)
		}
	}
}

// TestSeqLagLua: the scripts' seqLag is seqLagMicros.
func TestSeqLagLua(t *testing.T) {
	if want := fmt.Sprintf("local seqLag = %d\n", seqLagMicros); seqLagLua != want {
		t.Fatalf("seqLagLua %q, want %q", seqLagLua, want)
	}
}

// TestInboxHasLLENErrors: inboxHas asks a sorted-set inbox (LLEN's
// WRONGTYPE) with ZSCORE and fails on any other LLEN error, which a
// shadowed redis.pcall injects, instead of taking the inbox for a sorted
// set.
func TestInboxHasLLENErrors(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client(t)
	run := func(prelude string, key string) (any, error) {
		src := prelude + inboxHas + "return inboxHas(KEYS[1], ARGV[1], 0) and 1 or 0\n"
		return rdb.Eval(ctx, src, []string{key}, "a p").Result()
	}
	if err := rdb.RPush(ctx, "l", "5 a p").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, "z", redis.Z{Score: 5, Member: "a p"}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		want int64
	}{{"l", 1}, {"z", 1}, {"none", 0}} {
		got, err := run("", c.key)
		if err != nil || got != c.want {
			t.Errorf("inboxHas(%s) = %v, %v; want %d", c.key, got, err, c.want)
		}
	}
	inject := "local redis = setmetatable({pcall = function() return {err = 'ERR injected'} end}, {__index = redis})\n"
	if got, err := run(inject, "z"); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("inboxHas with LLEN failing ERR: %v, %v; want the error", got, err)
	}
}
