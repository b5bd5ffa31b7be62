package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"willow/flex"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
)

// Defaults.
const (
	DefaultRouteTimeout = 2 * time.Second
	DefaultMaxRetries   = 2
	DefaultRetryRatio   = 0.1
	DefaultBudgetWindow = 10 * time.Second
	DefaultMinRetries   = 5
	// MaxRetryAfter caps how long Call sleeps for a server's retry-after.
	MaxRetryAfter = 2 * time.Second
	// DefaultCallPerList is how many endpoints a list Call and CallSession
	// ask the master for (RouteRequest.max_per_list), unless MaxRetries
	// needs more: they try one endpoint and then at most MaxRetries more.
	DefaultCallPerList = 4
)

// ErrNoEndpoint is returned (wrapped) when Route lists no endpoint at all.
var ErrNoEndpoint = errors.New("no endpoint for role")

// RouterConfig configures a Router. Zero values mean the default.
type RouterConfig struct {
	// MasterAddr is the master's gRPC address; several may be given
	// separated by commas, tried in turn. Required.
	MasterAddr string
	// Region is the caller's region, for the primary list.
	Region string
	// TLS, when set, dials everything over TLS.
	TLS *tls.Config
	// Credentials, when set, are attached to every call on the router's
	// connections: a node's (Node.Credentials). A client's upload token
	// travels per call instead (Client sets it on the call's context).
	Credentials credentials.PerRPCCredentials
	// MaxRetries caps retries per call; default DefaultMaxRetries.
	MaxRetries int
	// RetryRatio is the retry budget: retries at most this fraction of
	// requests over BudgetWindow; default DefaultRetryRatio.
	RetryRatio float64
	// BudgetWindow; default DefaultBudgetWindow.
	BudgetWindow time.Duration
	// MinRetries is the budget's floor per window, so a quiet caller can
	// still fail over; default DefaultMinRetries, negative for none.
	MinRetries int
	// RouteTimeout bounds one Route call; default DefaultRouteTimeout.
	RouteTimeout time.Duration
	// CallPerList is how many endpoints a list Call and CallSession ask
	// the master for, the least loaded: default the larger of
	// DefaultCallPerList and MaxRetries+1 (what they can try), negative
	// for every endpoint. Route always asks for every endpoint.
	CallPerList int
	// Now; default time.Now.
	Now func() time.Time
	// Sleep waits for a retry-after hint; default a timer honouring ctx.
	Sleep func(ctx context.Context, d time.Duration) error
}

// routeKey names a cached Route answer: the role, the business and the
// cap on each list (0: every endpoint).
type routeKey struct {
	role, business string
	perList        int
}

type cachedRoute struct {
	resp    *willowv1.RouteResponse
	expires time.Time
}

// Router routes calls to Willow nodes. It is safe for concurrent use.
type Router struct {
	cfg     RouterConfig
	masters []string
	budget  *shedding.RetryBudget

	mu     sync.Mutex // guards routes, conns, flex, knobs, next
	routes map[routeKey]cachedRoute
	conns  map[string]*grpc.ClientConn
	flex   *willowv1.FlexState // of the newest Route answer
	knobs  flex.Knobs          // effective knobs of flex, made once per change
	next   int                 // index of the master to try first
}

// NewRouter validates cfg and returns a Router. It does not contact the
// master until the first call.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if cfg.MasterAddr == "" {
		return nil, errors.New("client: MasterAddr is required")
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.RetryRatio <= 0 {
		cfg.RetryRatio = DefaultRetryRatio
	}
	if cfg.BudgetWindow <= 0 {
		cfg.BudgetWindow = DefaultBudgetWindow
	}
	if cfg.MinRetries == 0 {
		cfg.MinRetries = DefaultMinRetries
	} else if cfg.MinRetries < 0 {
		cfg.MinRetries = 0
	}
	if cfg.RouteTimeout <= 0 {
		cfg.RouteTimeout = DefaultRouteTimeout
	}
	if cfg.CallPerList == 0 {
		cfg.CallPerList = max(DefaultCallPerList, cfg.MaxRetries+1)
	} else if cfg.CallPerList < 0 {
		cfg.CallPerList = 0 // every endpoint
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	var masters []string
	for _, a := range strings.Split(cfg.MasterAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			masters = append(masters, a)
		}
	}
	budget := shedding.NewRetryBudget(cfg.RetryRatio, cfg.BudgetWindow, cfg.Now)
	budget.SetFloor(cfg.MinRetries)
	return &Router{
		cfg:     cfg,
		masters: masters,
		budget:  budget,
		routes:  map[routeKey]cachedRoute{},
		conns:   map[string]*grpc.ClientConn{},
		knobs:   flex.Defaults(),
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Region is the caller's region.
func (r *Router) Region() string { return r.cfg.Region }

// Budget is the router's retry budget.
func (r *Router) Budget() *shedding.RetryBudget { return r.budget }

// Conn returns a pooled connection to addr; callers must not close it.
func (r *Router) Conn(addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[addr]; ok {
		return c, nil
	}
	opts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(shedding.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(shedding.StreamClientInterceptor()),
	}
	if r.cfg.Credentials != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(r.cfg.Credentials))
	}
	c, err := node.Dial(addr, r.cfg.TLS, opts...)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}

// Close closes every pooled connection.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a, c := range r.conns {
		c.Close()
		delete(r.conns, a)
	}
	return nil
}

// Knobs returns the knobs of the last Route answer (defaults before one).
func (r *Router) Knobs() flex.Knobs {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.knobs
}

// Route returns the master's answer for (role, business), every endpoint
// of both lists, from the cache while its TTL lasts. When no master
// answers, the last good answer is returned, however old, with no error.
func (r *Router) Route(ctx context.Context, role, business string) (*willowv1.RouteResponse, error) {
	return r.route(ctx, role, business, 0)
}

// route is Route with each list capped at perList endpoints (0: every
// one), cached apart from the answers with another cap.
func (r *Router) route(ctx context.Context, role, business string, perList int) (*willowv1.RouteResponse, error) {
	key := routeKey{role, business, perList}
	now := r.cfg.Now()
	r.mu.Lock()
	c, ok := r.routes[key]
	r.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.resp, nil
	}
	resp, err := r.askMasters(ctx, role, business, perList)
	if err != nil {
		if ok {
			return c.resp, nil // keep the last good answer
		}
		return nil, err
	}
	ttl := time.Duration(resp.GetTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	r.mu.Lock()
	r.routes[key] = cachedRoute{resp: resp, expires: now.Add(ttl)}
	if f := resp.GetFlex(); f != nil && (r.flex == nil || f.GetVersion() >= r.flex.GetVersion()) {
		r.flex, r.knobs = f, flex.Effective(f, r.cfg.Region, "")
	}
	r.mu.Unlock()
	return resp, nil
}

// Invalidate drops the cached answers for (role, business), Route's and
// Call's, so the next of each asks the master.
func (r *Router) Invalidate(role, business string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, perList := range []int{0, r.cfg.CallPerList} {
		if c, ok := r.routes[routeKey{role, business, perList}]; ok {
			c.expires = time.Time{}
			r.routes[routeKey{role, business, perList}] = c
		}
	}
}

func (r *Router) askMasters(ctx context.Context, role, business string, perList int) (*willowv1.RouteResponse, error) {
	var lastErr error
	r.mu.Lock()
	start := r.next
	r.mu.Unlock()
	for i := range r.masters {
		idx := (start + i) % len(r.masters)
		conn, err := r.Conn(r.masters[idx])
		if err != nil {
			lastErr = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.RouteTimeout)
		resp, err := willowv1.NewMasterClient(conn).Route(cctx, &willowv1.RouteRequest{Role: role, Region: r.cfg.Region, Business: business,
			MaxPerList: int32(perList)})
		cancel()
		if err == nil {
			r.mu.Lock()
			r.next = idx
			r.mu.Unlock()
			return resp, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("route %s: %w", role, lastErr)
}

// Retryable reports whether a failed call may be retried elsewhere.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// Call runs fn against the first endpoint of the primary list for role and,
// on a retryable failure, against the secondary list (another region) at
// most MaxRetries times — never when the retries knob is off or the retry
// budget is spent. It asks the master for CallPerList endpoints a list.
// It returns fn's last error.
func (r *Router) Call(ctx context.Context, role, business string, fn func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error) error {
	resp, err := r.route(ctx, role, business, r.cfg.CallPerList)
	if err != nil {
		return err
	}
	plan := attemptPlan(resp, r.cfg.MaxRetries)
	if len(plan) == 0 {
		return rpcstatus.New(codes.Unavailable, ReasonNoEndpoint, "%v: %s", ErrNoEndpoint, role)
	}
	r.budget.OnRequest()
	retries := r.Knobs().Retries
	for i, ep := range plan {
		if i > 0 {
			if gerr := r.mayRetry(ctx, retries, err); gerr != nil {
				return gerr
			}
		}
		var done bool
		if done, err = r.attempt(ctx, role, business, ep, fn); done {
			return err
		}
	}
	return err
}

// attempt calls fn on ep. done is true when err is the call's final
// outcome: success, an error no retry can help, or ctx ended.
func (r *Router) attempt(ctx context.Context, role, business string, ep *willowv1.Endpoint, fn func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error) (done bool, err error) {
	conn, cerr := r.Conn(ep.GetAddr())
	if cerr != nil {
		return false, status.Error(codes.Unavailable, cerr.Error())
	}
	err = fn(ctx, conn, ep)
	if err == nil || !Retryable(err) || ctx.Err() != nil {
		return true, err
	}
	if status.Code(err) == codes.Unavailable {
		// The node may be gone: ask the master again next time.
		r.Invalidate(role, business)
	}
	return false, err
}

// mayRetry is the gate before a retry after err: nil when it may go
// ahead (after sleeping the server's retry-after, capped), else the error
// to return: err itself with retries off, RESOURCE_EXHAUSTED retry_budget
// when the budget is spent.
func (r *Router) mayRetry(ctx context.Context, retries bool, err error) error {
	if !retries {
		return err
	}
	if !r.budget.AllowRetry() {
		// RESOURCE_EXHAUSTED retry_budget, as shedding and
		// docs/shedding.md promise; the last failure is in the text.
		return rpcstatus.Overload(shedding.ReasonRetryBudget, shedding.RetryAfterOverload,
			"retry budget spent; last attempt: %s", rpcstatus.Line(err))
	}
	if ra := rpcstatus.RetryAfter(err); ra > 0 {
		if ra > MaxRetryAfter {
			ra = MaxRetryAfter
		}
		if serr := r.cfg.Sleep(ctx, ra); serr != nil {
			return err
		}
	}
	return nil
}

// CallSession is Call for a call that continues a session the role's
// nodes of one region share (an upload: any front of the region resumes
// it from the region's store). A retry goes to another healthy node of
// the region of the first attempt — never a node already tried — and
// only when that region has no untried healthy node left to the other
// region, where the session starts over. The route is asked again after
// a failure, so a node the master ejected meanwhile is not tried. The
// retries knob, MaxRetries and the retry budget apply as in Call.
func (r *Router) CallSession(ctx context.Context, role, business string, fn func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error) error {
	tried := map[string]bool{}
	region := ""
	var err error
	r.budget.OnRequest()
	for attempt := 0; attempt <= r.cfg.MaxRetries; attempt++ {
		resp, rerr := r.route(ctx, role, business, r.cfg.CallPerList)
		if rerr != nil {
			if err == nil {
				return rerr
			}
			return err
		}
		ep := sessionEndpoint(resp, tried, region)
		if ep == nil {
			if err == nil {
				return rpcstatus.New(codes.Unavailable, ReasonNoEndpoint, "%v: %s", ErrNoEndpoint, role)
			}
			return err
		}
		if attempt == 0 {
			region = ep.GetRegion()
		} else if gerr := r.mayRetry(ctx, r.Knobs().Retries, err); gerr != nil {
			return gerr
		}
		tried[ep.GetAddr()] = true
		var done bool
		if done, err = r.attempt(ctx, role, business, ep, fn); done {
			return err
		}
	}
	return err
}

// sessionEndpoint is the next endpoint of a session: the first untried
// one of region (any region when ""), else the first untried one of
// another region.
func sessionEndpoint(resp *willowv1.RouteResponse, tried map[string]bool, region string) *willowv1.Endpoint {
	all := append(append([]*willowv1.Endpoint{}, resp.GetPrimary()...), resp.GetSecondary()...)
	var other *willowv1.Endpoint
	for _, ep := range all {
		if tried[ep.GetAddr()] {
			continue
		}
		if region == "" || ep.GetRegion() == region {
			return ep
		}
		if other == nil {
			other = ep
		}
	}
	return other
}

// attemptPlan is the order of endpoints a call tries: the first primary
// endpoint, then up to maxRetries endpoints of the secondary list. A retry
// never goes to the primary's region.
func attemptPlan(resp *willowv1.RouteResponse, maxRetries int) []*willowv1.Endpoint {
	var plan []*willowv1.Endpoint
	prim := resp.GetPrimary()
	if len(prim) > 0 {
		plan = append(plan, prim[0])
	}
	failedRegion := ""
	if len(plan) > 0 {
		failedRegion = plan[0].GetRegion()
	}
	for _, ep := range resp.GetSecondary() {
		if len(plan) > maxRetries {
			break
		}
		if failedRegion != "" && ep.GetRegion() == failedRegion {
			continue
		}
		plan = append(plan, ep)
	}
	if len(plan) == 0 {
		return nil
	}
	return plan
}
