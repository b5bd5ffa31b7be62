package timeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"

	"willow/auth"
	"willow/flex"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/redisconn"
	"willow/rpcstatus"
	"willow/urlsign"
)

// A publish reads followers scanPages FanoutBatch-sized pages at a time
// (one SSCAN), and sends their scripts fanoutPages batches to a
// pipeline, each pipeline as soon as its followers are read, at most
// fanoutFlights pipelines in flight: the service builds the next
// pipeline while Redis runs the last. A 5000-follower publish takes two
// SSCANs and five pipelines, not ten sequential round trips of each.
const (
	scanPages     = 8
	fanoutPages   = 2
	fanoutFlights = 4
)

// Defaults for Config.
const (
	DefaultKeyPrefix       = "willow:tl:"
	DefaultMaxInbox        = 1000
	DefaultReleaseBatch    = 100
	DefaultFanoutBatch     = 500
	DefaultPollLimit       = 100
	MaxPollLimit           = 1000
	DefaultIdleInterval    = 250 * time.Millisecond
	DefaultRefreshInterval = time.Second
	DefaultRedisTimeout    = 5 * time.Second
	// MaxIDLen bounds user, post and media IDs (bytes).
	MaxIDLen = 256
	// MaxMedia bounds the media IDs of one post.
	MaxMedia = 64
)

// Sentinel errors; the RPC edge turns them into gRPC statuses.
var (
	ErrBadRequest = errors.New("timeline: bad request")
	ErrBadCursor  = errors.New("timeline: bad cursor")
)

// Config configures a timeline service. Zero values mean the default. The
// yaml tags are the keys of the timeline: section of cmd/timeline's config
// file.
type Config struct {
	// KeyPrefix prefixes every Redis key; default DefaultKeyPrefix. It
	// may not hold '{' or '}': the keys carry their own hash tags.
	KeyPrefix string `yaml:"key_prefix"`
	// MaxInbox is the number of items kept per inbox (oldest dropped
	// first; a delivery trims when the inbox is min(32, MaxInbox/16
	// rounded up) items over, see the package doc); default
	// DefaultMaxInbox.
	MaxInbox int `yaml:"max_inbox"`
	// ReleaseBatch is the most items one release step moves; default
	// DefaultReleaseBatch.
	ReleaseBatch int `yaml:"release_batch"`
	// FanoutBatch is the most followers handled per Redis script while
	// publishing (on a Redis Cluster, a script takes the users of one
	// slot); default DefaultFanoutBatch. A publish sends scripts
	// fanoutPages batches at a time, in one pipeline.
	FanoutBatch int `yaml:"fanout_batch"`
	// IdleInterval is how often the release loop looks for work when
	// there is none (a knob change wakes it at once); default
	// DefaultIdleInterval.
	IdleInterval time.Duration `yaml:"idle_interval"`
	// RefreshInterval is how often the held-items gauges and the release
	// rate are read from Redis; default DefaultRefreshInterval.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// RedisTimeout bounds each Redis call of the background loops;
	// default DefaultRedisTimeout.
	RedisTimeout time.Duration `yaml:"redis_timeout"`
	// URLKeys sign the download URLs Poll returns (package urlsign; the
	// first signs). Unset: items carry media IDs only.
	URLKeys []urlsign.Key `yaml:"url_keys"`
	// URLTTL is how long those URLs are valid; default DefaultURLTTL.
	URLTTL time.Duration `yaml:"url_ttl"`
}

// Deps are the service's dependencies.
type Deps struct {
	// Node is the node runtime the service registers on; required.
	Node *node.Node
	// Redis holds all timeline state: one server or a Redis Cluster;
	// required.
	Redis Redis
	// Now gives posted-at times and held ages; default time.Now.
	Now func() time.Time
	// Rand jitters the release loop; default a randomly seeded source.
	Rand *rand.Rand
	// Logger; default the node's.
	Logger *slog.Logger
	// Media, when set, is asked who owns the media of a post (Publish
	// refuses another user's) and what kind it is; UploadMedia asks the
	// upload fronts. Nil: media are not checked (in-process tests).
	Media MediaLookup
}

// Server implements willowv1.TimelineServer and runs the release loop.
type Server struct {
	willowv1.UnimplementedTimelineServer
	cfg  Config
	node *node.Node
	rdb  Redis
	rk   redisKeys // the Redis key names
	// cluster: group users by slot (a Redis Cluster), else all together.
	cluster bool
	// nodeOf names the master serving a key's slot (nodeOfFunc); nil on
	// one server. A publish sends one script a master (nodeScript), or
	// one a slot when it answers "".
	nodeOf func(ctx context.Context, key string) string
	now    func() time.Time
	log    *slog.Logger
	m      *metrics

	media MediaLookup
	keys  *urlsign.Keyring // nil: Poll signs no URLs

	randMu sync.Mutex // guards rnd
	rnd    *rand.Rand

	wake chan struct{}

	// Last figures read from Redis by the refresher.
	heldItems   atomic.Int64
	heldUsers   atomic.Int64
	releasePerS atomic.Uint64 // float64 bits
}

var _ willowv1.TimelineServer = (*Server)(nil)

// New validates cfg, builds the service and registers it on deps.Node's
// gRPC server. It returns an error when a dependency is missing or a
// setting is negative.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Node == nil || deps.Redis == nil {
		return nil, errors.New("timeline: Node and Redis are required")
	}
	if cfg.MaxInbox < 0 || cfg.ReleaseBatch < 0 || cfg.FanoutBatch < 0 ||
		cfg.IdleInterval < 0 || cfg.RefreshInterval < 0 || cfg.RedisTimeout < 0 || cfg.URLTTL < 0 {
		return nil, errors.New("timeline: negative setting in Config")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	rk, err := newRedisKeys(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	if cfg.MaxInbox == 0 {
		cfg.MaxInbox = DefaultMaxInbox
	}
	if cfg.ReleaseBatch == 0 {
		cfg.ReleaseBatch = DefaultReleaseBatch
	}
	if cfg.FanoutBatch == 0 {
		cfg.FanoutBatch = DefaultFanoutBatch
	}
	if cfg.IdleInterval == 0 {
		cfg.IdleInterval = DefaultIdleInterval
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.RedisTimeout == 0 {
		cfg.RedisTimeout = DefaultRedisTimeout
	}
	if cfg.URLTTL == 0 {
		cfg.URLTTL = DefaultURLTTL
	}
	keys, err := newKeys(cfg.URLKeys)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		node:    deps.Node,
		rdb:     deps.Redis,
		rk:      rk,
		cluster: redisconn.IsCluster(deps.Redis),
		nodeOf:  nodeOfFunc(deps.Redis),
		now:     deps.Now,
		log:     deps.Logger,
		rnd:     deps.Rand,
		wake:    make(chan struct{}, 1),

		media: deps.Media,
		keys:  keys,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = deps.Node.Logger()
	}
	if s.rnd == nil {
		s.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	m, err := newMetrics(deps.Node.Registry())
	if err != nil {
		return nil, err
	}
	s.m = m
	deps.Node.OnKnobs(func(flex.Knobs) { s.poke() })
	if err := deps.Node.Guard().Declare(Methods()); err != nil {
		return nil, err
	}
	if err := deps.Node.Shedder().Declare(ShedClasses()); err != nil {
		return nil, err
	}
	willowv1.RegisterTimelineServer(deps.Node.Server(), s)
	return s, nil
}

// poke wakes the release loop (a knob changed).
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ref is the inbox member naming a post; IDs contain no spaces.
func ref(author, post string) string { return author + " " + post }

func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrBadRequest, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrBadRequest, what, MaxIDLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s is not UTF-8", ErrBadRequest, what)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q contains spaces or control characters", ErrBadRequest, what, id)
		}
	}
	return nil
}

// status converts an internal error into the gRPC error the RPCs return.
func status(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadRequest):
		return rpcstatus.New(codes.InvalidArgument, rpcstatus.ReasonBadRequest, "%v", err)
	case errors.Is(err, ErrBadCursor):
		return rpcstatus.New(codes.InvalidArgument, ReasonBadCursor, "%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return rpcstatus.New(codes.DeadlineExceeded, rpcstatus.ReasonDeadline, "%v", err)
	case errors.Is(err, context.Canceled):
		return rpcstatus.New(codes.Canceled, rpcstatus.ReasonCanceled, "%v", err)
	}
	return rpcstatus.New(codes.Unavailable, redisconn.ReasonRedis, "%v", err)
}

// Follow makes req.Follower follow req.Author. Idempotent.
func (s *Server) Follow(ctx context.Context, req *willowv1.FollowRequest) (*willowv1.FollowResponse, error) {
	req, err := actAsFollower(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.checkFollow(req); err != nil {
		return nil, status(err)
	}
	if err := s.rdb.SAdd(ctx, s.rk.followers(req.GetAuthor()), req.GetFollower()).Err(); err != nil {
		return nil, status(fmt.Errorf("timeline: follow: %w", err))
	}
	return &willowv1.FollowResponse{}, nil
}

// Unfollow undoes Follow. Idempotent; items already delivered or held stay.
func (s *Server) Unfollow(ctx context.Context, req *willowv1.FollowRequest) (*willowv1.FollowResponse, error) {
	req, err := actAsFollower(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.checkFollow(req); err != nil {
		return nil, status(err)
	}
	if err := s.rdb.SRem(ctx, s.rk.followers(req.GetAuthor()), req.GetFollower()).Err(); err != nil {
		return nil, status(fmt.Errorf("timeline: unfollow: %w", err))
	}
	return &willowv1.FollowResponse{}, nil
}

// actAsFollower checks that the caller may act for req.Follower (a client
// only for itself) and fills it in when empty.
func actAsFollower(ctx context.Context, req *willowv1.FollowRequest) (*willowv1.FollowRequest, error) {
	f, err := auth.ActAs(ctx, req.GetFollower())
	if err != nil {
		return nil, err
	}
	return &willowv1.FollowRequest{Follower: f, Author: req.GetAuthor()}, nil
}

func (s *Server) checkFollow(req *willowv1.FollowRequest) error {
	if err := checkID("follower", req.GetFollower()); err != nil {
		return err
	}
	if err := checkID("author", req.GetAuthor()); err != nil {
		return err
	}
	if req.GetFollower() == req.GetAuthor() {
		return fmt.Errorf("%w: a user cannot follow themselves (authors always see their own posts)", ErrBadRequest)
	}
	return nil
}

// Publish fans a post out: to the author's own inbox, and to each
// follower's inbox, or held list when the follower is delayed. It is
// idempotent per (author, post ID): a repeat returns the first outcome.
// Delivered counts the author's own inbox.
func (s *Server) Publish(ctx context.Context, req *willowv1.PublishRequest) (*willowv1.PublishResponse, error) {
	author, err := auth.ActAs(ctx, req.GetAuthor())
	if err != nil {
		return nil, err
	}
	if err := checkID("author", author); err != nil {
		return nil, status(err)
	}
	if len(req.GetMediaIds()) > MaxMedia {
		return nil, status(fmt.Errorf("%w: more than %d media IDs", ErrBadRequest, MaxMedia))
	}
	kinds, err := s.checkMedia(ctx, author, req.GetMediaIds())
	if err != nil {
		return nil, err
	}
	d, h, err := s.publish(ctx, author, req.GetPostId(), req.GetMediaIds(), kinds)
	if err != nil {
		return nil, status(err)
	}
	return &willowv1.PublishResponse{Delivered: int32(d), Held: int32(h)}, nil
}

func (s *Server) publish(ctx context.Context, author, post string, media, kinds []string) (delivered, held int, err error) {
	if err := checkID("author", author); err != nil {
		return 0, 0, err
	}
	if err := checkID("post_id", post); err != nil {
		return 0, 0, err
	}
	if len(media) > MaxMedia {
		return 0, 0, fmt.Errorf("%w: more than %d media IDs", ErrBadRequest, MaxMedia)
	}
	for _, id := range media {
		if err := checkID("media_id", id); err != nil {
			return 0, 0, err
		}
	}
	r := ref(author, post)
	pk := s.rk.post(r)
	mj, err := json.Marshal(media)
	if err != nil {
		return 0, 0, fmt.Errorf("timeline: publish: %w", err)
	}
	kj, err := json.Marshal(kinds)
	if err != nil {
		return 0, 0, fmt.Errorf("timeline: publish: %w", err)
	}
	// Create the post record once; a repeat keeps the first media and time.
	var got *redis.SliceCmd
	var created *redis.BoolCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		created = p.HSetNX(ctx, pk, "t", s.now().UnixMilli())
		p.HSetNX(ctx, pk, "m", string(mj))
		p.HSetNX(ctx, pk, "k", string(kj))
		got = p.HMGet(ctx, pk, "t", "done", "d", "h")
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("timeline: publish %s: %w", r, err)
	}
	v := got.Val()
	posted, _ := strconv.ParseInt(asString(v[0]), 10, 64)
	if asString(v[1]) == "1" {
		d, _ := strconv.Atoi(asString(v[2]))
		h, _ := strconv.Atoi(asString(v[3]))
		return d, h, nil
	}
	// fresh: no earlier publish of this post ran, so no inbox holds it.
	fresh := created.Val()
	ratio := s.node.Knobs().TimelineDelayRatio
	hash, now := s.node.UserHash(), s.now()
	seen := map[string]bool{author: true}
	batch := []target{{user: author, unit: hash.Unit(author, now), mode: "a"}}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fanoutFlights)
	var mu sync.Mutex
	flush := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch = nil
		g.Go(func() error {
			d, h, err := s.deliver(gctx, r, posted, fresh, b)
			if err != nil {
				return fmt.Errorf("timeline: publish %s: %w", r, err)
			}
			mu.Lock()
			delivered += d
			held += h
			mu.Unlock()
			return nil
		})
	}
	var cursor uint64
	for {
		users, next, err := s.rdb.SScan(gctx, s.rk.followers(author), cursor, "", int64(s.cfg.FanoutBatch*scanPages)).Result()
		if err != nil {
			if werr := g.Wait(); werr != nil {
				return 0, 0, werr
			}
			return 0, 0, fmt.Errorf("timeline: publish %s: followers: %w", r, err)
		}
		for _, u := range users {
			if seen[u] {
				continue
			}
			seen[u] = true
			t := target{user: u, unit: hash.Unit(u, now), mode: "d"}
			if t.unit < ratio { // hash.InRatio(u, now, ratio)
				t.mode = "h"
			}
			batch = append(batch, t)
			if len(batch) >= s.cfg.FanoutBatch*fanoutPages {
				flush()
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	flush()
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	if err := s.rdb.HSet(ctx, pk, "done", "1", "d", delivered, "h", held).Err(); err != nil {
		return 0, 0, fmt.Errorf("timeline: publish %s: %w", r, err)
	}
	s.m.published.Inc()
	s.m.delivered.Add(float64(delivered))
	s.m.held.Add(float64(held))
	return delivered, held, nil
}

func asString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// Poll returns up to req.Limit items of req.User's inbox after req.Cursor,
// in delivery order, and the cursor to pass next time (the same cursor
// when there is nothing new). An empty cursor starts from the beginning.
func (s *Server) Poll(ctx context.Context, req *willowv1.PollRequest) (*willowv1.PollResponse, error) {
	user, err := auth.ActAs(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	items, cur, err := s.poll(ctx, user, req.GetCursor(), int(req.GetLimit()))
	if err != nil {
		return nil, status(err)
	}
	return &willowv1.PollResponse{Items: items, Cursor: cur}, nil
}

func (s *Server) poll(ctx context.Context, user, cursor string, limit int) ([]*willowv1.TimelineItem, string, error) {
	if err := checkID("user", user); err != nil {
		return nil, "", err
	}
	var after int64
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
		after = n
	}
	if limit <= 0 {
		limit = DefaultPollLimit
	}
	limit = min(limit, MaxPollLimit)
	page, err := pollScript.Run(ctx, s.rdb, []string{s.rk.inbox(user)}, after, limit, s.cfg.MaxInbox).StringSlice()
	if err != nil {
		return nil, "", fmt.Errorf("timeline: poll %s: %w", user, err)
	}
	refs := make([]string, len(page))
	var last int64
	for i, e := range page {
		seq, r, ok := strings.Cut(e, " ")
		sc, err := strconv.ParseFloat(seq, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("timeline: poll %s: inbox item %q", user, e)
		}
		refs[i], last = r, int64(sc)
	}
	if len(refs) == 0 {
		return nil, strconv.FormatInt(after, 10), nil
	}
	cmds := make([]*redis.SliceCmd, len(refs))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range refs {
			cmds[i] = p.HMGet(ctx, s.rk.post(r), "t", "m", "k")
		}
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("timeline: poll %s: posts: %w", user, err)
	}
	items := make([]*willowv1.TimelineItem, 0, len(refs))
	for i, r := range refs {
		var author, post string
		if a, p, ok := strings.Cut(r, " "); ok {
			author, post = a, p
		}
		v := cmds[i].Val()
		it := &willowv1.TimelineItem{Author: author, PostId: post}
		it.PostedAtUnixMs, _ = strconv.ParseInt(asString(v[0]), 10, 64)
		if m := asString(v[1]); m != "" {
			_ = json.Unmarshal([]byte(m), &it.MediaIds)
		}
		var kinds []string
		if k := asString(v[2]); k != "" {
			_ = json.Unmarshal([]byte(k), &kinds)
		}
		it.Media = s.links(user, it.MediaIds, kinds)
		items = append(items, it)
	}
	return items, strconv.FormatInt(last, 10), nil
}

// Stats reads the held backlog from Redis.
func (s *Server) Stats(ctx context.Context, _ *willowv1.TimelineStatsRequest) (*willowv1.TimelineStatsResponse, error) {
	st, err := s.readStats(ctx)
	if err != nil {
		return nil, status(err)
	}
	return &willowv1.TimelineStatsResponse{
		HeldItems:       st.heldItems,
		HeldUsers:       st.heldUsers,
		ReleasedTotal:   st.released,
		OldestHeldAgeMs: st.oldestAgeMs,
		ReleasePerS:     s.releaseRate(),
	}, nil
}
