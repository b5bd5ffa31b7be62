package shedding

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"willow/rpcstatus"
)

// DefaultLevelTTL is how long a client trusts a callee's admission level
// without hearing it again.
const DefaultLevelTTL = 2 * time.Second

// WithRequest returns ctx carrying the request context (business and user
// ID) as outgoing gRPC metadata willow-business and willow-user.
func WithRequest(ctx context.Context, business, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MDBusiness, business, MDUser, user)
}

// ClientOption tunes the client interceptors.
type ClientOption func(*clientConfig)

type clientConfig struct {
	prio    map[string]int
	userKey []byte
	now     func() time.Time
	ttl     time.Duration
}

// WithPriorities sets the business priority table the client ranks its
// requests by; it must match the callees' (default DefaultPriorities).
func WithPriorities(p map[string]int) ClientOption {
	return func(c *clientConfig) { c.prio = p }
}

// WithUserKey sets the user-priority hash key; it must match the callees'
// Config.UserKey (default DefaultUserKey).
func WithUserKey(k []byte) ClientOption { return func(c *clientConfig) { c.userKey = k } }

// WithClock injects the client's time source (default time.Now).
func WithClock(now func() time.Time) ClientOption { return func(c *clientConfig) { c.now = now } }

// WithLevelTTL sets how long a learned level is trusted (default
// DefaultLevelTTL).
func WithLevelTTL(d time.Duration) ClientOption { return func(c *clientConfig) { c.ttl = d } }

// client is the state of one pair of client interceptors: the admission
// level last heard from each callee address.
type client struct {
	cfg     clientConfig
	hash    UserHash
	nBiz    int
	callees sync.Map // target -> *callee
}

// callee is what a client knows of one callee address.
type callee struct {
	mu      sync.Mutex      // guards the fields below
	level   int             // last admission level heard
	until   time.Time       // level trusted until then
	methods map[string]bool // methods that answered with a level (not exempt/deferred)
}

func newClient(opts []ClientOption) *client {
	c := &client{cfg: clientConfig{prio: DefaultPriorities(), userKey: []byte(DefaultUserKey), now: time.Now, ttl: DefaultLevelTTL}}
	for _, o := range opts {
		o(&c.cfg)
	}
	c.hash = NewUserHash(c.cfg.userKey)
	maxP := 0
	for _, p := range c.cfg.prio {
		maxP = max(maxP, p)
	}
	c.nBiz = maxP + 1
	return c
}

// outgoing returns ctx with the request context set: the caller's own, or
// else the one of the incoming request being served (so a whole call chain
// is one user's), and the business and user.
func outgoing(ctx context.Context) (context.Context, string, string) {
	b := lastOf(metadata.ValueFromOutgoingContext(ctx, MDBusiness))
	u := lastOf(metadata.ValueFromOutgoingContext(ctx, MDUser))
	if b != "" || u != "" {
		return ctx, b, u
	}
	b, u = requestContext(ctx)
	if b == "" && u == "" {
		return ctx, "", ""
	}
	return WithRequest(ctx, b, u), b, u
}

// drop reports whether the callee at target, as last heard, would reject a
// request of business and user on method.
func (c *client) drop(target, method, business, user string) (level int, dropped bool) {
	if user == "" {
		return 0, false // the callee ranks anonymous requests at random
	}
	v, ok := c.callees.Load(target)
	if !ok {
		return 0, false
	}
	ce := v.(*callee)
	now := c.cfg.now()
	ce.mu.Lock()
	level, until, known := ce.level, ce.until, ce.methods[method]
	ce.mu.Unlock()
	if !known || now.After(until) {
		return 0, false
	}
	p, ok := c.cfg.prio[business]
	if !ok {
		p = c.nBiz
	}
	return level, compoundKey(p, c.hash.Sum(user, now)) > level
}

func (c *client) learn(target, method string, hdr metadata.MD) {
	v := lastOf(hdr.Get(HeaderAdmitLevel))
	if v == "" {
		return
	}
	level, err := strconv.Atoi(v)
	if err != nil {
		return
	}
	ce, _ := c.callees.LoadOrStore(target, &callee{methods: map[string]bool{}})
	cl := ce.(*callee)
	cl.mu.Lock()
	cl.level = level
	cl.until = c.cfg.now().Add(c.cfg.ttl)
	cl.methods[method] = true
	cl.mu.Unlock()
}

func dropErr(level int) error {
	return rpcstatus.Overload(ReasonOverload, RetryAfterOverload, "shed early by caller: callee admits up to level %d", level)
}

// UnaryClientInterceptor propagates the request context (from WithRequest,
// or else from the incoming request being served), learns each callee's
// admission level from the willow-admit-level response header, and fails
// locally with RESOURCE_EXHAUSTED reason overload a request the callee
// would reject, per callee address. A level is trusted for the level TTL;
// methods that never answered with a level (exempt, deferred) are never
// dropped, nor are requests without a user ID.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClient(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ctx, business, user := outgoing(ctx)
		target := cc.Target()
		if level, drop := c.drop(target, method, business, user); drop {
			return dropErr(level)
		}
		var hdr metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(callOpts, grpc.Header(&hdr))...)
		c.learn(target, method, hdr)
		return err
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams; the level
// is learned when the response header arrives.
func StreamClientInterceptor(opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newClient(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, business, user := outgoing(ctx)
		target := cc.Target()
		if level, drop := c.drop(target, method, business, user); drop {
			return nil, dropErr(level)
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			return nil, err
		}
		return &learnStream{ClientStream: cs, learn: func(md metadata.MD) { c.learn(target, method, md) }}, nil
	}
}

// learnStream learns the level from the header once a message or the end
// of the stream has arrived (so Header does not block).
type learnStream struct {
	grpc.ClientStream
	learn func(metadata.MD)
	once  sync.Once
}

func (s *learnStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		if md, herr := s.ClientStream.Header(); herr == nil {
			s.learn(md)
		}
	})
	return err
}
