package timeline

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// target is one user a post goes to.
type target struct {
	user string
	unit float64 // node.UserHash().Unit(user, now)
	mode string  // publishScript's: "a" author, "d" deliver, "h" hold
}

// deliver delivers or holds post r (posted at posted, ms) for targets:
// one publishScript per slot's users (at most FanoutBatch a script), all
// in one pipeline; then it adds the users now holding it to the shared
// held index. It returns the delivered and held counts, repeats
// included.
//
// The index is written after the held sets, never before: a release that
// empties a user's held set drops the user from the index and then looks
// at the held set again (Server.reindex), so a post held in between is
// seen by one of the two. A publish that fails between the two steps
// returns an error; its retry indexes the user again.
func (s *Server) deliver(ctx context.Context, r string, posted int64, ts []target) (delivered, held int, err error) {
	var calls []scriptCall
	var who [][]int // indices into ts, per call
	floor := s.seqFloor()
	for _, idx := range s.bySlot(len(ts), func(i int) string { return ts[i].user }) {
		seq := s.seq(s.slotOf(ts[idx[0]].user))
		for len(idx) > 0 {
			n := min(len(idx), s.cfg.FanoutBatch)
			chunk := idx[:n]
			idx = idx[n:]
			c := scriptCall{keys: make([]string, 0, 1+2*n), args: make([]any, 0, 3+n)}
			c.keys = append(c.keys, seq)
			c.args = append(c.args, r, s.cfg.MaxInbox, floor)
			for _, i := range chunk {
				c.keys = append(c.keys, s.rk.inbox(ts[i].user), s.rk.held(ts[i].user))
				c.args = append(c.args, ts[i].mode)
			}
			calls = append(calls, c)
			who = append(who, chunk)
		}
	}
	cmds, err := s.runScripts(ctx, publishScript, calls)
	if err != nil {
		return 0, 0, err
	}
	var units, ages []redis.Z
	newHeld := 0
	for c, cmd := range cmds {
		codes, err := cmd.Int64Slice()
		if err != nil || len(codes) != len(who[c]) {
			return 0, 0, fmt.Errorf("publish script: %d codes for %d users: %v", len(codes), len(who[c]), err)
		}
		for j, code := range codes {
			t := ts[who[c][j]]
			switch code {
			case 0, 1:
				delivered++
			case 2:
				newHeld++
				fallthrough
			case 3:
				held++
				units = append(units, redis.Z{Score: t.unit, Member: t.user})
				ages = append(ages, redis.Z{Score: float64(posted), Member: t.user})
			}
		}
	}
	if len(units) > 0 {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, s.rk.heldUnits(), units...)
			p.ZAddLT(ctx, s.rk.heldAges(), ages...)
			if newHeld > 0 {
				p.IncrBy(ctx, s.rk.heldCount(), int64(newHeld))
			}
			return nil
		}); err != nil {
			return 0, 0, fmt.Errorf("held index: %w", err)
		}
	}
	return delivered, held, nil
}

// bySlot groups the n users user(0..n-1) by slotOf, in order of first
// appearance, as index lists.
func (s *Server) bySlot(n int, user func(int) string) [][]int {
	if !s.cluster {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	at := map[int]int{}
	var groups [][]int
	for i := range n {
		sl := s.slotOf(user(i))
		g, ok := at[sl]
		if !ok {
			g = len(groups)
			at[sl] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}
