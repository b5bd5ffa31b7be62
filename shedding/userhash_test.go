package shedding_test

import (
	"strconv"
	"testing"
	"time"

	"willow/shedding"
)

func TestUserHashInRatioIsDeterministicAndMonotonic(t *testing.T) {
	h := shedding.NewUserHash(nil)
	now := newClock().Now()
	in := 0
	for i := range 10_000 {
		u := "user-" + strconv.Itoa(i)
		a := h.InRatio(u, now, 0.3)
		if a != h.InRatio(u, now, 0.3) || a != (h.Unit(u, now) < 0.3) {
			t.Fatal("not deterministic, or not Unit < ratio")
		}
		if a {
			in++
			if !h.InRatio(u, now, 0.5) {
				t.Fatalf("%s in at 0.3 but not at 0.5", u)
			}
		}
		if h.InRatio(u, now, 0) || !h.InRatio(u, now, 1) {
			t.Fatalf("%s: ratio 0 holds nobody, 1 everybody", u)
		}
		if p := h.Priority(u, now); p < 0 || p >= shedding.UserLevels {
			t.Fatalf("priority %d", p)
		}
	}
	if in < 2700 || in > 3300 {
		t.Fatalf("%d of 10000 in at ratio 0.3", in)
	}
}

// The shedder sheds by ratio exactly the users UserHash.InRatio names:
// the ones an edge without a shedder sheds and the timeline holds.
func TestShedderShedsTheUserHashsUsers(t *testing.T) {
	clk := newClock()
	s, err := shedding.New(shedding.Config{}, shedding.Deps{Now: clk.Now, Knobs: knobs(map[string]float64{"comment": 0.4})})
	if err != nil {
		t.Fatal(err)
	}
	h := shedding.NewUserHash(nil)
	for _, at := range []time.Duration{0, time.Hour} {
		clk.Advance(at)
		for i := range 2000 {
			u := "user-" + strconv.Itoa(i)
			reason, ok := s.Admit("comment", u)
			if shed := !ok && reason == shedding.ReasonShedRatio; shed != h.InRatio(u, clk.Now(), 0.4) {
				t.Fatalf("%s at %v: shedder shed=%v, UserHash.InRatio=%v", u, clk.Now(), shed, !shed)
			}
			if s.UserHash() != h {
				t.Fatal("the shedder's UserHash is not NewUserHash(DefaultUserKey)")
			}
		}
	}
}
