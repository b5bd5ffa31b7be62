package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"willow/rpcstatus"
	"willow/token"
)

// Metadata keys (lower case, as gRPC sends them).
const (
	MDAuthorization = "authorization"
	MDClusterSecret = "x-willow-cluster-secret"
	MDNodeID        = "x-willow-node-id"
	MDNodeRole      = "x-willow-node-role"
	MDNodeInstance  = "x-willow-node-instance"
)

// MaxCredentialLen bounds every credential and identity field read from
// metadata; longer is bad_credentials.
const MaxCredentialLen = 4096

// Rule says who may call one method.
type Rule struct {
	// Classes accepted (Client|Node, ...); zero accepts nobody.
	Classes Class
	// Role an Operator caller needs; default RoleRead.
	Role Role
}

// Table maps full gRPC method names ("/willow.v1.Upload/Begin") to rules.
// Each service declares one, in one place.
type Table map[string]Rule

// PublicMethods is the table every Guard starts with: health checks and
// server reflection, open to anyone (Kubernetes probes, grpcurl).
var PublicMethods = Table{
	healthpb.Health_Check_FullMethodName: {Classes: Public},
	healthpb.Health_Watch_FullMethodName: {Classes: Public},
	// List is the newer health method; reflection both versions.
	"/grpc.health.v1.Health/List":                                    {Classes: Public},
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      {Classes: Public},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {Classes: Public},
}

// Config is what a Guard verifies credentials with. Zero fields disable
// that kind of credential: with no UploadSecret no client is accepted, and
// so on.
type Config struct {
	// ClusterSecret authenticates nodes that present it in metadata (no
	// TLS); empty accepts only certificate-identified nodes.
	ClusterSecret string
	// UploadSecret verifies clients' upload tokens.
	UploadSecret []byte
	// Operators are the named operator identities.
	Operators *Operators
	// Now; default time.Now.
	Now func() time.Time
}

// Guard authenticates calls and enforces the tables declared on it. Build
// with New or Open; the zero value is not usable.
type Guard struct {
	cfg  Config
	open bool

	mu    sync.Mutex                      // serializes Declare
	rules atomic.Pointer[map[string]Rule] // replaced whole by Declare: calls read it without a lock
}

// New returns a Guard verifying credentials with cfg, with PublicMethods
// declared. Verified client certificates naming a node (CertNode) are
// always accepted; a Config with nothing else accepts only those (it fails
// closed). The error is reserved for invalid configurations.
func New(cfg Config) (*Guard, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Guard{cfg: cfg}
	g.rules.Store(&map[string]Rule{})
	_ = g.Declare(PublicMethods)
	return g, nil
}

// Open returns a Guard that refuses unclassified methods but lets every
// classified call through unauthenticated, with no Caller in its context.
// For in-process unit tests only (see the package comment).
func Open() *Guard {
	g := &Guard{cfg: Config{Now: time.Now}, open: true}
	g.rules.Store(&map[string]Rule{})
	_ = g.Declare(PublicMethods)
	return g
}

// Operators are the operator identities g accepts (nil: none).
func (g *Guard) Operators() *Operators { return g.cfg.Operators }

// IsOpen reports whether g was built with Open.
func (g *Guard) IsOpen() bool { return g.open }

// Declare adds t's rules. Declaring a method twice with a different rule
// is an error (two services cannot disagree about one method).
func (g *Guard) Declare(t Table) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := maps.Clone(*g.rules.Load())
	for m, r := range t {
		if r.Classes&Operator != 0 && r.Role == "" {
			r.Role = RoleRead
		}
		if old, ok := next[m]; ok && old != r {
			return fmt.Errorf("auth: %s declared twice (%v, %v)", m, old.Classes, r.Classes)
		}
		next[m] = r
	}
	g.rules.Store(&next)
	return nil
}

// Rule returns the rule declared for method.
func (g *Guard) Rule(method string) (Rule, bool) {
	r, ok := (*g.rules.Load())[method]
	return r, ok
}

// Authorize authenticates the call in ctx (incoming gRPC metadata and
// peer) for method and returns ctx carrying the Caller. Errors are gRPC
// statuses: PERMISSION_DENIED unclassified_method, UNAUTHENTICATED,
// PERMISSION_DENIED wrong_caller_class / missing_role.
func (g *Guard) Authorize(ctx context.Context, method string) (context.Context, error) {
	rule, ok := g.Rule(method)
	if !ok {
		return ctx, rpcstatus.New(codes.PermissionDenied, ReasonUnclassified, "method %s has no caller class", method)
	}
	if rule.Classes&Public != 0 || g.open {
		return ctx, nil
	}
	// Each key read on its own: copying the call's whole metadata
	// (metadata.FromIncomingContext) was most of the guard's cost.
	c, err := g.authenticate(func(k string) string {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return v[0]
		}
		return ""
	}, peerCert(ctx))
	if err != nil {
		return ctx, err
	}
	if err := Check(c, rule); err != nil {
		return ctx, err
	}
	return NewContext(ctx, c), nil
}

// Check returns nil when c satisfies rule, else PERMISSION_DENIED
// wrong_caller_class or missing_role.
func Check(c Caller, rule Rule) error {
	if rule.Classes&c.Class == 0 {
		return rpcstatus.New(codes.PermissionDenied, ReasonWrongClass, "%s may not make this call (it is for %v callers)", c, rule.Classes)
	}
	if c.Class == Operator {
		need := rule.Role
		if need == "" {
			need = RoleRead
		}
		if !c.Has(need) {
			return rpcstatus.New(codes.PermissionDenied, ReasonMissingRole, "operator %s lacks role %s", c.Name, need)
		}
	}
	return nil
}

// AuthorizeHTTP authenticates an HTTP request against rule, reading the
// same credentials from its headers (Authorization: Bearer, X-Willow-*)
// and TLS state. Errors are gRPC statuses; HTTPStatus maps them.
func (g *Guard) AuthorizeHTTP(r *http.Request, rule Rule) (Caller, error) {
	if rule.Classes&Public != 0 || g.open {
		return Caller{Class: Public}, nil
	}
	var cert *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		cert = r.TLS.VerifiedChains[0][0]
	}
	c, err := g.authenticate(r.Header.Get, cert)
	if err != nil {
		return Caller{}, err
	}
	return c, Check(c, rule)
}

// HTTPStatus maps an error of this package to an HTTP status: 401 for
// UNAUTHENTICATED, 403 for PERMISSION_DENIED, 500 otherwise.
func HTTPStatus(err error) int {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// UnaryServerInterceptor is the guard's unary interceptor.
func (g *Guard) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := g.Authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamServerInterceptor is the guard's stream interceptor: the stream is
// authenticated as it opens and its handler sees the Caller.
func (g *Guard) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := g.Authorize(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return h(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

func peerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

// authenticate finds who presented the credentials get reads (the first
// value of a metadata key, "" for none) and cert: a certificate naming a
// node, the cluster secret, an operator token or an upload token.
func (g *Guard) authenticate(get func(key string) string, cert *x509.Certificate) (Caller, error) {
	if cert != nil {
		if c, ok := CertNode(cert); ok {
			return c, nil
		}
	}
	if s := get(MDClusterSecret); s != "" {
		id, role, inst := get(MDNodeID), get(MDNodeRole), get(MDNodeInstance)
		switch {
		case g.cfg.ClusterSecret == "" || len(s) > MaxCredentialLen ||
			subtle.ConstantTimeCompare([]byte(s), []byte(g.cfg.ClusterSecret)) != 1:
			return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonBadCredentials, "wrong cluster secret")
		case id == "" || role == "" || len(id) > 128 || len(role) > 32 || len(inst) > 128:
			return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonBadCredentials, "node credentials need %s and %s", MDNodeID, MDNodeRole)
		}
		return Caller{Class: Node, NodeID: id, NodeRole: role, Instance: inst, Credential: "secret"}, nil
	}
	authz := get(MDAuthorization)
	if authz == "" {
		return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonNoCredentials,
			"this call needs credentials (authorization: Bearer TOKEN, or node credentials)")
	}
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(authz, "bearer ")
	}
	if !ok || tok == "" || len(tok) > MaxCredentialLen {
		return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonBadCredentials, "authorization must be \"Bearer TOKEN\"")
	}
	if op, ok := g.cfg.Operators.Lookup(tok); ok {
		return Caller{Class: Operator, Name: op.Name, Roles: op.Roles, Credential: "operator"}, nil
	}
	if len(g.cfg.UploadSecret) > 0 && strings.HasPrefix(tok, "v1.") {
		cl, err := token.Verify(g.cfg.UploadSecret, tok, g.cfg.Now())
		switch {
		case errors.Is(err, token.ErrExpired):
			return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonTokenExpired, "%v", err)
		case err != nil:
			return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonBadCredentials, "%v", err)
		}
		return Caller{Class: Client, User: cl.User, Business: cl.Business, Credential: "token"}, nil
	}
	return Caller{}, rpcstatus.New(codes.Unauthenticated, ReasonBadCredentials, "unknown token")
}

// NodeRoles are the roles a node certificate may name.
var NodeRoles = []string{"master", "upload", "compress", "edgecache", "timeline"}

// CertNode returns the node identity a verified certificate names:
// Subject CommonName the node ID, the first OrganizationalUnit that is a
// node role its role. ok is false for a certificate naming no node role.
func CertNode(cert *x509.Certificate) (Caller, bool) {
	id := cert.Subject.CommonName
	if id == "" {
		return Caller{}, false
	}
	for _, ou := range cert.Subject.OrganizationalUnit {
		for _, r := range NodeRoles {
			if ou == r {
				sum := sha256.Sum256(cert.Raw)
				return Caller{Class: Node, NodeID: id, NodeRole: r, Credential: "cert:" + hex.EncodeToString(sum[:])}, true
			}
		}
	}
	return Caller{}, false
}
