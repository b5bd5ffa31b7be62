package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/redisconn"
)

// job is a pending compress of one media item: the durable promise that
// an acknowledged upload gets its variants.
type job struct {
	Key      string `json:"key"`
	MediaID  string `json:"media_id"`
	Business string `json:"business"`
	Attempts int    `json:"attempts"`
	NextAt   int64  `json:"next_at_ms"`
	LastErr  string `json:"last_err,omitempty"`
	// Internal counts the attempts compress answered INTERNAL, UNKNOWN or
	// DATA_LOSS (it ran the task and broke): capped by
	// Config.MaxInternalAttempts.
	Internal int `json:"internal,omitempty"`
	// FirstAt is when the job was journaled (ms); its retries stop after
	// Config.MaxRetryAge.
	FirstAt int64 `json:"first_at_ms,omitempty"`

	src journal // the journal the job was read from
}

// journal is a durable set of jobs keyed by media key.
type journal interface {
	// Add records j durably (replacing a job of the same key).
	Add(ctx context.Context, j job) error
	// Due returns up to n jobs whose NextAt is not after now.
	Due(ctx context.Context, now time.Time, n int) ([]job, error)
	// Done removes the job of key; a missing job is not an error.
	Done(ctx context.Context, key string) error
	// Len counts the jobs.
	Len(ctx context.Context) (int64, error)
}

// fileJournal keeps one JSON file per job in a directory; each change is
// an atomic, fsynced file write or removal.
// The three journals.
var (
	_ journal = (*fileJournal)(nil)
	_ journal = (*redisJournal)(nil)
	_ journal = (*fallbackJournal)(nil)
)

type fileJournal struct{ dir string }

func newFileJournal(dir string) (*fileJournal, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &fileJournal{dir: dir}, nil
}

func (f *fileJournal) path(key string) string { return filepath.Join(f.dir, key+".json") }

func (f *fileJournal) Add(_ context.Context, j job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := writeFileSync(f.path(j.Key), b); err != nil {
		return fmt.Errorf("journal add %s: %w", j.Key, err)
	}
	return nil
}

// prepareAdd readies j's Add where the journal allows it: a file journal
// writes and fsyncs the job under a temporary name at once, so that add,
// called later, only renames it into place and fsyncs the directory. For
// the other journals add is j's Add. Exactly one of add and abort is
// called; a failed preparation comes back from add.
func prepareAdd(ctx context.Context, jr journal, j job) (add func() error, abort func()) {
	f, ok := jr.(*fileJournal)
	if !ok {
		return func() error { return jr.Add(ctx, j) }, func() {}
	}
	b, err := json.Marshal(j)
	if err == nil {
		err = writeTempSync(f.path(j.Key), b)
	}
	if err != nil {
		err = fmt.Errorf("journal add %s: %w", j.Key, err)
		return func() error { return err }, func() {}
	}
	return func() error {
			if err := publishTemp(f.path(j.Key)); err != nil {
				return fmt.Errorf("journal add %s: %w", j.Key, err)
			}
			return nil
		}, func() {
			_ = os.Remove(f.path(j.Key) + ".tmp")
		}
}

func (f *fileJournal) Due(_ context.Context, now time.Time, n int) ([]job, error) {
	ents, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var out []job
	for _, e := range ents {
		if len(out) >= n {
			break
		}
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if err != nil {
			continue
		}
		var j job
		if json.Unmarshal(b, &j) != nil || j.Key == "" {
			continue
		}
		if j.NextAt <= now.UnixMilli() {
			j.src = f
			out = append(out, j)
		}
	}
	return out, nil
}

// Done removes the job file without syncing the directory: a removal lost
// in a crash only runs the (idempotent) job once more.
func (f *fileJournal) Done(_ context.Context, key string) error {
	if err := os.Remove(f.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("journal done %s: %w", key, err)
	}
	return nil
}

func (f *fileJournal) Len(context.Context) (int64, error) {
	ents, err := os.ReadDir(f.dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n, nil
}

// Redis is the part of go-redis the compress journal uses. *redis.Client
// (one server) and *redis.ClusterClient (Redis Cluster) both satisfy it.
type Redis interface {
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	ZRangeByScore(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.StringSliceCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
}

var (
	_ Redis = (*redis.Client)(nil)
	_ Redis = (*redis.ClusterClient)(nil)

	_ journal = (*fileJournal)(nil)
	_ journal = (*redisJournal)(nil)
	_ journal = (*fallbackJournal)(nil)
)

// redisJournal keeps jobs in a sorted set scored by NextAt (ms), under
// key, plus a hash of their JSON in the same Redis Cluster slot
// ("{KEY}:jobs"), so one transaction changes both. Redis's appendonly
// file makes them durable.
type redisJournal struct {
	rdb  Redis
	key  string // the sorted set
	jobs string // the hash
}

// newRedisJournal returns the journal under key; a key whose hash could
// not share its slot (a '}' without a hash tag) is an error.
func newRedisJournal(rdb Redis, key string) (*redisJournal, error) {
	jobs, ok := redisconn.SameSlot(key, ":jobs")
	if !ok {
		return nil, fmt.Errorf("journal key %q: empty, or a '}' without a hash tag", key)
	}
	return &redisJournal{rdb: rdb, key: key, jobs: jobs}, nil
}

func (r *redisJournal) Add(ctx context.Context, j job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.jobs, j.Key, b)
		p.ZAdd(ctx, r.key, redis.Z{Score: float64(j.NextAt), Member: j.Key})
		return nil
	})
	if err != nil {
		return fmt.Errorf("journal add %s: %w", j.Key, err)
	}
	return nil
}

func (r *redisJournal) Due(ctx context.Context, now time.Time, n int) ([]job, error) {
	keys, err := r.rdb.ZRangeByScore(ctx, r.key, &redis.ZRangeBy{Min: "-inf", Max: fmt.Sprint(now.UnixMilli()), Count: int64(n)}).Result()
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	vals, err := r.rdb.HMGet(ctx, r.jobs, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]job, 0, len(vals))
	for i, v := range vals {
		s, ok := v.(string)
		var j job
		if !ok || json.Unmarshal([]byte(s), &j) != nil {
			j = job{Key: keys[i]} // the hash entry was lost: retry from the key alone
		}
		j.src = r
		out = append(out, j)
	}
	return out, nil
}

func (r *redisJournal) Done(ctx context.Context, key string) error {
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, r.key, key)
		p.HDel(ctx, r.jobs, key)
		return nil
	})
	return err
}

func (r *redisJournal) Len(ctx context.Context) (int64, error) {
	return r.rdb.ZCard(ctx, r.key).Result()
}

// fallbackJournal writes to primary (Redis) and, when that fails, to the
// file journal, so a job is never dropped while Redis is down; it reads
// both.
type fallbackJournal struct {
	primary journal
	file    *fileJournal
	onErr   func(error)
}

func (f *fallbackJournal) Add(ctx context.Context, j job) error {
	if j.src == journal(f.file) {
		return f.file.Add(ctx, j)
	}
	if err := f.primary.Add(ctx, j); err != nil {
		f.onErr(err)
		return f.file.Add(ctx, j)
	}
	return nil
}

func (f *fallbackJournal) Due(ctx context.Context, now time.Time, n int) ([]job, error) {
	a, err := f.primary.Due(ctx, now, n)
	if err != nil {
		f.onErr(err)
	}
	b, ferr := f.file.Due(ctx, now, n-len(a))
	return append(a, b...), ferr
}

func (f *fallbackJournal) Done(ctx context.Context, key string) error {
	ferr := f.file.Done(ctx, key)
	if err := f.primary.Done(ctx, key); err != nil {
		return err
	}
	return ferr
}

func (f *fallbackJournal) Len(ctx context.Context) (int64, error) {
	a, err := f.primary.Len(ctx)
	b, ferr := f.file.Len(ctx)
	if err != nil {
		return b, err
	}
	return a + b, ferr
}
