package timeline

import (
	"fmt"
	"testing"

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
