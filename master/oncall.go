package master

import (
	"context"

	"google.golang.org/grpc/codes"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// operators builds the identities the master accepts: the node's (its
// auth config, from the identities file), extra ones from Config, and,
// when set, the legacy shared Config.OncallToken as the identity "oncall"
// with role oncall.
func operators(node, extra *auth.Operators, legacy string) (*auth.Operators, error) {
	ops := node
	for _, name := range extra.Names() {
		id, _ := extra.Get(name)
		var err error
		if ops, err = ops.WithHash(id); err != nil {
			return nil, err
		}
	}
	if legacy == "" {
		return ops, nil
	}
	return ops.With("oncall", legacy, auth.RoleOncall)
}

// operator returns the operator making the call in ctx and checks it has
// role. The node's guard has authenticated gRPC calls already (the Caller
// in ctx); in-process calls without a Caller (an Open guard in tests, or
// the console, which passes its own) present token, looked up in the
// master's identities. Errors: UNAUTHENTICATED no_credentials /
// bad_credentials, PERMISSION_DENIED missing_role / wrong_caller_class /
// read_only. It does not audit.
func (s *Server) operator(ctx context.Context, token string, role auth.Role) (auth.Caller, error) {
	if c, ok := auth.FromContext(ctx); ok {
		return c, auth.Check(c, auth.Rule{Classes: auth.Operator, Role: role})
	}
	if s.ops.Len() == 0 {
		return auth.Caller{}, rpcstatus.New(codes.PermissionDenied, ReasonReadOnly, "this master has no operator identities configured: it is read-only")
	}
	if token == "" {
		return auth.Caller{}, rpcstatus.New(codes.Unauthenticated, auth.ReasonNoCredentials, "an operator token is required (--token or WILLOW_ONCALL_TOKEN)")
	}
	op, ok := s.ops.Lookup(token)
	if !ok {
		return auth.Caller{}, rpcstatus.New(codes.Unauthenticated, auth.ReasonBadCredentials, "unknown operator token")
	}
	c := auth.Caller{Class: auth.Operator, Name: op.Name, Roles: op.Roles}
	return c, auth.Check(c, auth.Rule{Classes: auth.Operator, Role: role})
}

// authorize checks that the caller is an on-call operator, audits a
// denial, and returns the actor to record: the authenticated name, never
// one the request declares.
func (s *Server) authorize(ctx context.Context, token, action, scope, reason string) (string, error) {
	c, err := s.operator(ctx, token, auth.RoleOncall)
	actor := actorOf(c)
	if err != nil {
		s.flexChanges.WithLabelValues(action, "denied").Inc()
		cur, _, _ := s.current()
		s.audit(&willowv1.AuditEntry{Actor: actor, Action: action, Scope: scope, Reason: reason,
			FromVersion: cur.Version, ToVersion: cur.Version, Error: rpcstatus.Line(err)})
	}
	return actor, err
}

// actorOf is the audit actor of c: an operator's name (with the channel,
// "alice@console", when the console made the call), or "unauthenticated".
func actorOf(c auth.Caller) string {
	switch {
	case c.Class == auth.Operator:
		return c.Name
	case c.Class != 0:
		return c.String()
	}
	return "unauthenticated"
}
