package upload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"willow/buffer"
	"willow/client"
	"willow/limits"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
)

// Defaults of Config.
const (
	DefaultCompressTimeout = 30 * time.Second
	// DefaultCommitWait is how long Commit waits for the first compress
	// attempt by default.
	DefaultCommitWait   = 5 * time.Second
	DefaultStoreTimeout = 60 * time.Second
	DefaultStagingTTL   = 24 * time.Hour
	DefaultCommittedTTL = time.Hour
	DefaultRetryMin     = time.Second
	DefaultRetryMax     = 5 * time.Minute
	DefaultSyncEvery    = 8 << 20
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultCompactDeadBytes is the dead space at which a pool is
	// compacted without a drain.
	DefaultCompactDeadBytes = 64 << 20
	// MaxChunkBytes is the largest chunk a client may send.
	MaxChunkBytes = 1 << 20
)

// Config configures a Server. Zero values mean the documented default.
// The yaml tags are the keys of the upload: section of cmd/upload's config
// file; the fields tagged "-" are set by code (Limits from the file's
// limits: section, which the compress workers share; Secret from
// upload.secret, -secret or $WILLOW_UPLOAD_SECRET).
type Config struct {
	// Secret is the upload-token HMAC secret; required.
	Secret []byte `yaml:"-"`
	// StagingDir holds staged chunks and, without Redis, the compress
	// journal; it survives restarts. Required.
	StagingDir string `yaml:"staging"`
	// Limits bound an upload's size, an image's width x height and a
	// video's duration (per business) as the headers state them; they are
	// the compress workers' limits, from the same config (package limits).
	// Zero fields mean the limits defaults.
	Limits limits.Limits `yaml:"-"`
	// CompressTimeout bounds one compress call; default
	// DefaultCompressTimeout.
	CompressTimeout time.Duration `yaml:"compress_timeout"`
	// DrainWait bounds a Drain with wait set (DEADLINE_EXCEEDED
	// drain_deadline after it); default DefaultDrainWait.
	DrainWait time.Duration `yaml:"drain_wait"`
	// CommitWait is how long Commit waits for the first compress attempt,
	// so its reply can list the variants; the acknowledgement never
	// depends on it (the job is journaled first). Commit waits only for a
	// task a worker starts at once: one that would queue (every slot of
	// the worker asked busy) is answered processing without waiting, and
	// runs queued. Default DefaultCommitWait, at most CompressTimeout;
	// negative: do not wait (compress runs in the background). Kept short
	// so a compress task that runs long at a peak does not hold its
	// client's acknowledgement.
	CommitWait time.Duration `yaml:"commit_wait"`
	// StoreTimeout bounds one store or pool write; default
	// DefaultStoreTimeout.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// StagingTTL: an upload not committed within it is removed; default
	// DefaultStagingTTL.
	StagingTTL time.Duration `yaml:"staging_ttl"`
	// StagingBudgetBytes bounds the declared bytes of uploads staged and
	// not committed on this front: a new upload past it is refused
	// RESOURCE_EXHAUSTED staging_full; default DefaultStagingBudgetBytes.
	StagingBudgetBytes int64 `yaml:"staging_budget_bytes"`
	// StagingFullRetryAfter is the retry-after hint of staging_full;
	// default DefaultStagingFullRetryAfter.
	StagingFullRetryAfter time.Duration `yaml:"staging_full_retry_after"`
	// GCInterval is how often the staging GC removes expired uploads;
	// default DefaultGCInterval.
	GCInterval time.Duration `yaml:"gc_interval"`
	// CommittedTTL: how long the staging dir remembers a committed upload
	// (the store record remembers it for ever); default DefaultCommittedTTL.
	CommittedTTL time.Duration `yaml:"committed_ttl"`
	// RetryMin and RetryMax bound the compress-retry backoff; defaults
	// DefaultRetryMin, DefaultRetryMax.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
	// MaxInternalAttempts caps the compress attempts of one job that
	// answer INTERNAL (UNKNOWN, DATA_LOSS); the job then fails with reason
	// retries_exhausted. Default DefaultMaxInternalAttempts.
	MaxInternalAttempts int `yaml:"max_internal_attempts"`
	// MaxRetryAge caps how long a job is retried through any transient
	// error; then it fails with reason retries_exhausted. Default
	// DefaultMaxRetryAge.
	MaxRetryAge time.Duration `yaml:"max_retry_age"`
	// SyncEvery: a chunk stream fsyncs the staging file at least every
	// SyncEvery bytes (and always at its end); default DefaultSyncEvery.
	SyncEvery int64 `yaml:"sync_every"`
	// DisableStagingMirror turns off the copy of staged bytes to the
	// region's store (resume.go): an upload then resumes only on the
	// front that staged it. The mirror is on by default.
	DisableStagingMirror bool `yaml:"disable_staging_mirror"`
	// MirrorTimeout bounds one mirror write or read of the staging copy
	// in the store; default DefaultMirrorTimeout.
	MirrorTimeout time.Duration `yaml:"mirror_timeout"`
	// MirrorInterval: inside one stream or request, the staged bytes are
	// copied to the store at a SyncEvery point only when the last copy
	// (or the end of the last stream or request) is at least this old;
	// the first point of an upload with no session record in the store
	// always copies, and the end of every stream or request copies
	// whatever is new. Default
	// DefaultMirrorInterval; negative: at every SyncEvery point.
	MirrorInterval time.Duration `yaml:"mirror_interval"`
	// PollInterval is how often Run looks for due work; default
	// DefaultPollInterval.
	PollInterval time.Duration `yaml:"poll_interval"`
	// CompactDeadBytes: Run compacts a pool in the background once its
	// dead bytes (deleted blobs, tombstones) reach it, and after every
	// drain that left dead bytes; default DefaultCompactDeadBytes.
	CompactDeadBytes int64 `yaml:"compact_dead_bytes"`
	// ChunkIdleTimeout closes a Chunks stream that sends nothing for that
	// long (DEADLINE_EXCEEDED idle_timeout); default
	// DefaultChunkIdleTimeout.
	ChunkIdleTimeout time.Duration `yaml:"chunk_idle_timeout"`
	// MaxStreamsPerConn and MaxStreamsPerUser cap the open Chunks streams
	// of one connection and of one user (RESOURCE_EXHAUSTED
	// too_many_streams); defaults DefaultMaxStreamsPerConn,
	// DefaultMaxStreamsPerUser.
	MaxStreamsPerConn int `yaml:"max_streams_per_conn"`
	MaxStreamsPerUser int `yaml:"max_streams_per_user"`
	// MaxStagedPerConn and MaxStagedPerUser cap the uploads one connection
	// and one user have begun and not committed (RESOURCE_EXHAUSTED
	// too_many_uploads); defaults DefaultMaxStagedPerConn,
	// DefaultMaxStagedPerUser.
	MaxStagedPerConn int `yaml:"max_staged_per_conn"`
	MaxStagedPerUser int `yaml:"max_staged_per_user"`
	// JournalKey is the Redis key of the compress journal (a sorted set;
	// the jobs' hash is "{JournalKey}:jobs", in the same cluster slot);
	// default "willow:upload:NODE:compress".
	JournalKey string `yaml:"journal_key"`
	// RetireTimeout bounds Retire (drains and job hand-over on SIGTERM);
	// default DefaultRetireTimeout. Keep it inside the pod's
	// terminationGracePeriodSeconds.
	RetireTimeout time.Duration `yaml:"retire_timeout"`
	// RetireKeepPool1: Retire leaves pool 1 in place (its volume will
	// come back with the front) instead of draining it.
	RetireKeepPool1 bool `yaml:"retire_keep_pool1"`
	// Logger; default the node's logger.
	Logger *slog.Logger `yaml:"-"`
}

// Deps are the Server's collaborators.
type Deps struct {
	// Node is the node the service runs in (live knobs, metrics,
	// identity); required.
	Node *node.Node
	// Store holds raw bytes, variants and records; required.
	Store store.Store
	// Redis, when set, holds the compress journal (a sorted set); nil
	// keeps the journal in the staging dir. When Redis fails the journal
	// falls back to the staging dir, so nothing is forgotten. One server
	// or a Redis Cluster.
	Redis Redis
	// Router reaches compress workers; when nil, Compress is used.
	Router *client.Router
	// Compress is a direct compress client used when Router is nil
	// (tests, single-box setups).
	Compress willowv1.CompressClient
	// Pool1 and Pool2 are the buffer pools; nil disables a pool.
	Pool1, Pool2 *buffer.Pool
	// WouldShed reports whether admission control would have shed a Begin
	// it deferred to the handler, and why; default shedding.WouldShed.
	WouldShed func(ctx context.Context) (reason string, shed bool)
	// Now; default time.Now.
	Now func() time.Time
	// Rand returns a number in [0, 1) for the retry jitter; default
	// math/rand/v2's Float64.
	Rand func() float64
}

// router is the part of client.Router the front uses.
type router interface {
	Call(ctx context.Context, role, business string, fn func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error) error
}

func (c *Config) setDefaults() error {
	if len(c.Secret) == 0 {
		return errors.New("upload: Config.Secret is required")
	}
	if c.StagingDir == "" {
		return errors.New("upload: Config.StagingDir is required")
	}
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	c.Limits = c.Limits.WithDefaults()
	def(&c.SyncEvery, DefaultSyncEvery)
	def(&c.CompactDeadBytes, DefaultCompactDeadBytes)
	def(&c.StagingBudgetBytes, DefaultStagingBudgetBytes)
	defD(&c.StagingFullRetryAfter, DefaultStagingFullRetryAfter)
	defD(&c.GCInterval, DefaultGCInterval)
	defD(&c.CompressTimeout, DefaultCompressTimeout)
	defD(&c.StoreTimeout, DefaultStoreTimeout)
	if c.CommitWait == 0 {
		c.CommitWait = min(DefaultCommitWait, c.CompressTimeout)
	}
	defD(&c.StagingTTL, DefaultStagingTTL)
	defD(&c.CommittedTTL, DefaultCommittedTTL)
	defD(&c.RetryMin, DefaultRetryMin)
	defD(&c.RetryMax, DefaultRetryMax)
	defD(&c.PollInterval, DefaultPollInterval)
	defD(&c.MirrorTimeout, DefaultMirrorTimeout)
	if c.MirrorInterval == 0 {
		c.MirrorInterval = DefaultMirrorInterval
	}
	defD(&c.MaxRetryAge, DefaultMaxRetryAge)
	if c.MaxInternalAttempts <= 0 {
		c.MaxInternalAttempts = DefaultMaxInternalAttempts
	}
	defD(&c.RetireTimeout, DefaultRetireTimeout)
	defD(&c.ChunkIdleTimeout, DefaultChunkIdleTimeout)
	defN := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defN(&c.MaxStreamsPerConn, DefaultMaxStreamsPerConn)
	defN(&c.MaxStreamsPerUser, DefaultMaxStreamsPerUser)
	defN(&c.MaxStagedPerConn, DefaultMaxStagedPerConn)
	defN(&c.MaxStagedPerUser, DefaultMaxStagedPerUser)
	if c.RetryMax < c.RetryMin {
		return fmt.Errorf("upload: RetryMax %s < RetryMin %s", c.RetryMax, c.RetryMin)
	}
	return nil
}
