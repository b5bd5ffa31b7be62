package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"willow/redisconn"
)

// flexStore keeps the flex document the masters share: the document with
// its version, the audit log and a change signal. redisFlexStore is the
// one the master runs on; the flex handlers need nothing else, so their
// tests run on an in-memory one.
type flexStore interface {
	// Load returns the document; an absent one is the zero flexDoc
	// (version 0, the normal level).
	Load(ctx context.Context) (flexDoc, error)
	// Swap stores next if the stored revision (flexDoc.rev) is still
	// expect, appends audit to the audit log and signals the change, all
	// at once. ok is false, with no error, when another writer changed the
	// document first.
	Swap(ctx context.Context, expect int64, next flexDoc, audit []byte) (ok bool, err error)
	// Audit appends one entry to the audit log, which keeps the newest
	// auditKeep entries.
	Audit(ctx context.Context, entry []byte) error
	// History returns up to limit audit entries, newest first.
	History(ctx context.Context, limit int64) ([]string, error)
	// Changes signals every change made through any master until ctx is
	// done. Signals may coalesce: the receiver rereads the document. It
	// returns once the subscription is confirmed (or could not be, within
	// redisTimeout), so a change made after it returns is signalled.
	Changes(ctx context.Context) <-chan struct{}
}

var _ flexStore = (*redisFlexStore)(nil)

// redisFlexStore keeps the document in the hash {PREFIX}flex:doc (fields
// rev, version and doc; documents written before rev existed have none), the audit log in the list {PREFIX}flex:audit, and
// publishes each new version on {PREFIX}flex:changed: one hash tag, the
// master's (Server.key), so the CAS script keeps to one cluster slot.
type redisFlexStore struct {
	rdb    Redis
	prefix string // redisconn.OneSlot(KeyPrefix) + "flex:"
	cas    *redis.Script
}

func newRedisFlexStore(rdb Redis, keyPrefix string) *redisFlexStore {
	return &redisFlexStore{rdb: rdb, prefix: redisconn.OneSlot(keyPrefix) + "flex:", cas: redis.NewScript(casScript)}
}

func (r *redisFlexStore) key(name string) string { return r.prefix + name }

// casScript sets the document if its revision is still ARGV[1], appends
// the audit entry and publishes the new revision. It returns -1 on
// success, else the revision found.
const casScript = `
local v = tonumber(redis.call('HGET', KEYS[1], 'rev') or redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return v end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'version', ARGV[6], 'doc', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
end
redis.call('PUBLISH', KEYS[3], ARGV[2])
return -1
`

func (r *redisFlexStore) Load(ctx context.Context) (flexDoc, error) {
	var d flexDoc
	raw, err := r.rdb.HGet(ctx, r.key("doc"), "doc").Bytes()
	if errors.Is(err, redis.Nil) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("read flex doc: %w", err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("decode flex doc: %w", err)
	}
	return d, nil
}

func (r *redisFlexStore) Swap(ctx context.Context, expect int64, next flexDoc, audit []byte) (bool, error) {
	docJSON, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	res, err := r.cas.Run(ctx, r.rdb,
		[]string{r.key("doc"), r.key("audit"), r.key("changed")},
		expect, next.rev(), docJSON, audit, auditKeep, next.Version).Int64()
	if err != nil {
		return false, fmt.Errorf("write flex doc: %w", err)
	}
	return res == -1, nil
}

func (r *redisFlexStore) Audit(ctx context.Context, entry []byte) error {
	key := r.key("audit")
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, entry)
		p.LTrim(ctx, key, 0, auditKeep-1)
		return nil
	})
	return err
}

func (r *redisFlexStore) History(ctx context.Context, limit int64) ([]string, error) {
	return r.rdb.LRange(ctx, r.key("audit"), 0, limit-1).Result()
}

func (r *redisFlexStore) Changes(ctx context.Context) <-chan struct{} {
	sub := r.rdb.Subscribe(ctx, r.key("changed"))
	// SUBSCRIBE is only sent; a PUBLISH that Redis serves before it would
	// be missed. Wait for Redis's confirmation. If Redis is down, go-redis
	// resubscribes on reconnect and the periodic reload covers the gap.
	confirm, cancel := context.WithTimeout(ctx, redisTimeout)
	_, _ = sub.Receive(confirm)
	cancel()
	out := make(chan struct{}, 1)
	go func() {
		defer sub.Close()
		msgs := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default: // one pending signal is enough: the receiver rereads
				}
			}
		}
	}()
	return out
}
