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

// deliver delivers or holds post r (posted at posted, ms; fresh: the
// post record was new, see publishScript) for targets: one
// publishScript per slot's users (at most FanoutBatch a script), or on a
// Redis Cluster one nodeScript per master's users, all in one pipeline;
// the users now holding it are added to the shared held index and
// count, after the held sets, as the package doc's held-index paragraph
// ("Every user with held items is in the held index", doc.go: the one
// account of who writes hu, ha and hc, in what order, and why) says:
// on one server indexHolds' ZADD behind the scripts, on a cluster and
// for users held behind a backlog the pipeline below. It returns the
// delivered and held counts, repeats included.
func (s *Server) deliver(ctx context.Context, r string, posted int64, fresh bool, ts []target) (delivered, held int, err error) {
	first := "0"
	if fresh {
		first = "1"
	}
	groups := s.groups(ts)
	since := retrySince(posted)
	calls, who := s.nodeCalls(ctx, r, first, since, groups, ts)
	sc := nodeScript
	var index func(redis.Pipeliner)
	var indexed *redis.IntCmd // index's command, of the last send
	if calls == nil {
		sc = publishScript
		for _, g := range groups {
			calls = append(calls, s.slotCall(r, first, since, posted, g, ts))
			who = append(who, g.users)
		}
		if !s.cluster {
			index = s.indexHolds(ctx, ts, &indexed)
		}
	}
	cmds, err := s.runScripts(ctx, sc, calls, index)
	if err == nil && indexed != nil && indexed.Err() != nil {
		err = fmt.Errorf("held index: %w", indexed.Err())
	}
	if sc == nodeScript {
		// A slot moved: send the users a call did not reach one slot a
		// script (all of them, fresh or not, when the call failed).
		err = nil
		for c, cmd := range cmds {
			done, cerr := cmd.Text()
			if cerr == nil && len(done) >= len(who[c]) {
				continue
			}
			redoFirst := first
			if cerr != nil {
				done, redoFirst = "", "0"
			}
			gs := s.groups(ts, who[c][len(done):]...)
			var redo []scriptCall
			users := who[c][:len(done):len(done)]
			for _, g := range gs {
				redo = append(redo, s.slotCall(r, redoFirst, since, posted, g, ts))
				users = append(users, g.users...)
			}
			again, rerr := s.runScripts(ctx, publishScript, redo, nil)
			if rerr != nil {
				return 0, 0, rerr
			}
			codes := []byte(done)
			for _, a := range again {
				t, _ := a.Text()
				codes = append(codes, t...)
			}
			cmds[c] = redis.NewCmdResult(string(codes), nil)
			who[c] = users
		}
	}
	if err != nil {
		return 0, 0, err
	}
	// The held users the scripts' pipeline has not indexed and counted
	// (see above; on a cluster the index's slot is another's).
	var units, ages []redis.Z
	newHeld := 0
	for c, cmd := range cmds {
		codes, err := cmd.Text()
		if err != nil || len(codes) != len(who[c]) {
			return 0, 0, fmt.Errorf("publish script: %d codes for %d users: %v", len(codes), len(who[c]), err)
		}
		for j, code := range []byte(codes) {
			t := ts[who[c][j]]
			switch code {
			case '0', '1':
				delivered++
			case '2':
				if s.cluster { // on one server the script added it to hc
					newHeld++
				}
				fallthrough
			case '3':
				held++
				if !s.cluster && t.mode == "h" {
					continue
				}
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

// indexHolds returns the command that adds the targets to hold (mode
// "h") to the shared held users' index (hu, scored by their unit now,
// refreshed at every publish so a user's release eligibility follows the
// hour's hash), for a publish on one server to queue behind its scripts
// (why that order is safe: the held-index paragraph of doc.go); it sets
// *cmd to the command each time it queues it, for the caller to read its
// reply. nil when no target is to be held.
func (s *Server) indexHolds(ctx context.Context, ts []target, cmd **redis.IntCmd) func(redis.Pipeliner) {
	var units []redis.Z
	for _, t := range ts {
		if t.mode == "h" {
			units = append(units, redis.Z{Score: t.unit, Member: t.user})
		}
	}
	if len(units) == 0 {
		return nil
	}
	return func(p redis.Pipeliner) { *cmd = p.ZAdd(ctx, s.rk.heldUnits(), units...) }
}

// group is one script's worth of one slot's users: the slot's sequence
// counter, duplicate marks and held count ("" on a cluster: none), and
// the users (indices into the targets), held users last.
type group struct {
	seq, dm, held string
	users         []int
}

// groups splits ts (or the targets only, when given) by slot, in order of
// first appearance, into groups of at most FanoutBatch users.
func (s *Server) groups(ts []target, only ...int) []group {
	idx := only
	if idx == nil {
		idx = make([]int, len(ts))
		for i := range idx {
			idx[i] = i
		}
	}
	var gs []group
	for _, in := range s.bySlot(idx, func(i int) string { return ts[i].user }) {
		slot := s.slotOf(ts[in[0]].user)
		seq, dm, held := s.seq(slot), s.dupMarks(slot), s.slotHeld(slot)
		for len(in) > 0 {
			n := min(len(in), s.cfg.FanoutBatch)
			g := group{seq: seq, dm: dm, held: held, users: make([]int, 0, n)}
			for _, i := range in[:n] {
				if ts[i].mode != "h" {
					g.users = append(g.users, i)
				}
			}
			for _, i := range in[:n] {
				if ts[i].mode == "h" {
					g.users = append(g.users, i)
				}
			}
			gs = append(gs, g)
			in = in[n:]
		}
	}
	return gs
}

// appendGroup appends g's counter, modes, inboxes and the held keys of
// its users to hold, as nodeScript reads them, to args.
func (s *Server) appendGroup(args []any, g group, ts []target) []any {
	modes := make([]byte, len(g.users))
	for j, i := range g.users {
		modes[j] = ts[i].mode[0]
	}
	args = append(args, g.seq, string(modes))
	for _, i := range g.users {
		args = append(args, s.rk.inbox(ts[i].user))
	}
	for _, i := range g.users {
		if ts[i].mode == "h" {
			args = append(args, s.rk.held(ts[i].user))
		}
	}
	return args
}

// slotCall is publishScript's call for g. On one server (g.held set)
// the script also adds the items it holds to the shared held count.
func (s *Server) slotCall(r, first string, since, posted int64, g group, ts []target) scriptCall {
	kv := s.appendGroup(make([]any, 0, 2+2*len(g.users)), g, ts)
	keys := make([]string, 0, len(kv)+3)
	keys = append(keys, g.seq, g.dm)
	counted := "0"
	if g.held != "" {
		keys = append(keys, g.held, s.rk.heldCount(), s.rk.heldAges())
		counted = "1"
	}
	for _, k := range kv[2:] {
		keys = append(keys, k.(string))
	}
	return scriptCall{keys: keys, args: []any{r, s.cfg.MaxInbox, s.seqFloor(), kv[1], first, s.rk.prefix, counted, since, posted}}
}

// nodeCalls groups the groups by the master serving their slot (on a
// Redis Cluster; nil elsewhere) into nodeScript calls of about
// FanoutBatch users each, and returns them with their users in order.
func (s *Server) nodeCalls(ctx context.Context, r, first string, since int64, groups []group, ts []target) ([]scriptCall, [][]int) {
	if s.nodeOf == nil {
		return nil, nil
	}
	var calls []scriptCall
	var who [][]int
	open := map[string]int{} // node -> its call being filled
	floor := s.seqFloor()
	for _, g := range groups {
		node := s.nodeOf(ctx, g.seq)
		if node == "" {
			return nil, nil
		}
		c, ok := open[node]
		if !ok {
			c = len(calls)
			open[node] = c
			calls = append(calls, scriptCall{keys: []string{g.seq}, args: []any{r, s.cfg.MaxInbox, floor, first, s.rk.prefix, since}})
			who = append(who, nil)
		}
		calls[c].args = s.appendGroup(calls[c].args, g, ts)
		who[c] = append(who[c], g.users...)
		if len(who[c]) >= s.cfg.FanoutBatch {
			delete(open, node)
		}
	}
	return calls, who
}

// bySlot groups the users user(i), i in idx, by slotOf, in order of
// first appearance, as index lists.
func (s *Server) bySlot(idx []int, user func(int) string) [][]int {
	if !s.cluster {
		return [][]int{idx}
	}
	at := map[int]int{}
	var groups [][]int
	for _, i := range idx {
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
