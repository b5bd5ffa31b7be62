package timeline

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/redisconn"
)

// Redis is the part of go-redis the timeline uses. *redis.Client (one
// server) and *redis.ClusterClient (Redis Cluster) both satisfy it.
type Redis interface {
	redis.Scripter // the fan-out and release scripts
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	SAdd(ctx context.Context, key string, members ...any) *redis.IntCmd
	SRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	SScan(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd
	HSet(ctx context.Context, key string, values ...any) *redis.IntCmd
}

var (
	_ Redis = (*redis.Client)(nil)
	_ Redis = (*redis.ClusterClient)(nil)
)

// redisKeys names the timeline's Redis keys (see the package doc).
type redisKeys struct {
	prefix string // Config.KeyPrefix, without braces
	global string // redisconn.OneSlot(prefix): the shared keys' hash tag
}

func newRedisKeys(prefix string) (redisKeys, error) {
	if strings.ContainsAny(prefix, "{}") {
		return redisKeys{}, fmt.Errorf("timeline: KeyPrefix %q holds a brace: the keys carry their own hash tags", prefix)
	}
	return redisKeys{prefix: prefix, global: redisconn.OneSlot(prefix)}, nil
}

// userTag escapes a user ID for a hash tag: '{', '}' and '%' become
// %7B, %7D and %25, so every user has a tag of their own.
func userTag(user string) string {
	if !strings.ContainsAny(user, "{}%") {
		return user
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(user)
}

// inbox and held are one user's keys: one hash tag, one cluster slot.
// deliverGroup (scripts.go) names a user's held set from the inbox key
// (prefix .. "h:" .. what follows prefix .. "in:"): change both together.
func (k redisKeys) inbox(user string) string { return k.prefix + "in:{" + userTag(user) + "}" }
func (k redisKeys) held(user string) string  { return k.prefix + "h:{" + userTag(user) + "}" }

func (k redisKeys) followers(author string) string { return k.prefix + "f:" + author }
func (k redisKeys) post(ref string) string         { return k.prefix + "p:" + ref }

// Shared keys, all in one slot: the held index and counters, the bucket.
func (k redisKeys) heldUnits() string { return k.global + "hu" }
func (k redisKeys) heldAges() string  { return k.global + "ha" }
func (k redisKeys) heldCount() string { return k.global + "hc" }
func (k redisKeys) released() string  { return k.global + "rel" }
func (k redisKeys) bucket() string    { return k.global + "rl" }

// seq is the sequence counter of the users of slot (Server.slotOf): on
// one server a shared key, on a cluster a key with a hash tag of that
// slot's own (slotTag).
func (s *Server) seq(slot int) string {
	if !s.cluster {
		return s.rk.global + "sq"
	}
	return s.rk.prefix + "sq:{" + slotTag(slot) + "}"
}

// dupMarks are the duplicate marks of the users of slot (deliverGroup):
// the posts a publish that was not the first ran for lately. On one
// server a shared key; on a cluster nodeScript names it from the slot's
// counter (prefix "dm:" and the counter's hash tag): change both
// together.
func (s *Server) dupMarks(slot int) string {
	if !s.cluster {
		return s.rk.global + "dm"
	}
	return s.rk.prefix + "dm:{" + slotTag(slot) + "}"
}

// slotHeld is the held count of the users of slot on one server: the
// items their held sets hold, or more (see the package doc). A Redis
// Cluster keeps none (publishScript says why): "".
func (s *Server) slotHeld(slot int) string {
	if s.cluster {
		return ""
	}
	return s.rk.global + "sh"
}

var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, redisconn.Slots)
	for left, i := len(tags), 0; left > 0; i++ {
		t := strconv.FormatInt(int64(i), 36)
		if sl := redisconn.Slot("{" + t + "}"); tags[sl] == "" {
			tags[sl] = t
			left--
		}
	}
	return tags
})

// slotTag is a hash tag that Redis Cluster puts in slot: the first
// base-36 number that hashes there.
func slotTag(slot int) string { return slotTags()[slot] }

// seqFloor is publishScript's and moveScript's sequence floor: now in
// µs. A slot's counter starts from it, above any inbox score written
// before the counter.
func (s *Server) seqFloor() int64 { return s.now().UnixMicro() }

// seqLagMicros is how far (µs) a slot's counter may trail the sequence
// floor before a script lifts it to the floor (deliverGroup, nextSeq):
// so every item a script adds has a sequence number no lower than its
// caller's clock less a second, and a retried publish need not look
// through a user's older items (retrySince).
const seqLagMicros = 1_000_000

// maxClockSkew bounds how far the clocks of the timeline services that
// share a Redis may differ.
const maxClockSkew = 5 * time.Minute

// retrySince is the lowest sequence number an item of a post whose
// record was created at posted (ms, by some service's clock) can carry:
// every publish or release of it ran after posted, on a clock at most
// maxClockSkew behind, and took a number no lower than its clock less
// seqLagMicros. A publish that is not the first looks through a list
// inbox only down to it (inboxHas).
func retrySince(posted int64) int64 {
	return (posted-maxClockSkew.Milliseconds())*1000 - seqLagMicros
}

// slotOwner is the part of *redis.ClusterClient that tells which master
// serves a key's slot (from its slot map, no round trip).
type slotOwner interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// nodeOfFunc returns Server.nodeOf for rdb: the address of the master
// serving a key, or nil when rdb is not a Redis Cluster client.
func nodeOfFunc(rdb Redis) func(ctx context.Context, key string) string {
	so, ok := rdb.(slotOwner)
	if !ok || !redisconn.IsCluster(rdb) {
		return nil
	}
	return func(ctx context.Context, key string) string {
		c, err := so.MasterForKey(ctx, key)
		if err != nil {
			return ""
		}
		return c.Options().Addr
	}
}

// slotOf groups users whose keys may share one script: by cluster slot on
// a Redis Cluster, all together on one server.
func (s *Server) slotOf(user string) int {
	if !s.cluster {
		return 0
	}
	return redisconn.Slot(s.rk.inbox(user))
}

// scriptCall is one run of a script in a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// runScripts runs sc once per call in one pipeline (on a cluster, one
// per master, in parallel) and returns the results in order, and the
// first call's error if any failed (the results then say which). Calls that
// find the script missing on their node (NOSCRIPT: a restarted or new
// node) are sent again with the script's body. after (nil: none) adds
// commands behind the calls, to the same pipeline, and again behind
// calls sent again, so they run after every call that ran (one server
// only: a cluster pipeline's commands to different masters run in no
// order); runScripts does not read their replies: the caller keeps the
// commands after queues (the last send's are the ones that count).
func (s *Server) runScripts(ctx context.Context, sc *redis.Script, calls []scriptCall, after func(redis.Pipeliner)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	send := func(idx []int, eval bool) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				if eval {
					cmds[i] = sc.Eval(ctx, p, calls[i].keys, calls[i].args...)
				} else {
					cmds[i] = sc.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
				}
			}
			if after != nil {
				after(p)
			}
			return nil
		})
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := send(all, false); err != nil {
		var again []int
		for i, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			_ = send(again, true)
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}
