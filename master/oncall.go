package master

import (
	"context"
	"crypto/subtle"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// checkOncall is the master's one on-call check (flex changes, rollbacks,
// drills, the console). It does not audit. An empty configured token is
// PERMISSION_DENIED (read-only master), an empty token UNAUTHENTICATED, a
// wrong one PERMISSION_DENIED, all with reason oncall_token.
func (s *Server) checkOncall(token string) error {
	switch {
	case s.cfg.OncallToken == "":
		return rpcstatus.New(codes.PermissionDenied, "oncall_token", "this master has no on-call token configured: it is read-only")
	case token == "":
		return rpcstatus.New(codes.Unauthenticated, "oncall_token", "an on-call token is required (--token or WILLOW_ONCALL_TOKEN)")
	case subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.OncallToken)) != 1:
		return rpcstatus.New(codes.PermissionDenied, "oncall_token", "wrong on-call token")
	}
	return nil
}

// authorize checks the on-call token and audits a denial.
func (s *Server) authorize(ctx context.Context, token, action, actor, scope, reason string) error {
	err := s.checkOncall(token)
	if err != nil {
		s.flexChanges.WithLabelValues(action, "denied").Inc()
		cur, _, _ := s.current()
		s.audit(&willowv1.AuditEntry{Actor: actorOf(ctx, actor), Action: action, Scope: scope, Reason: reason,
			FromVersion: cur.Version, ToVersion: cur.Version, Error: rpcstatus.Line(err)})
	}
	return err
}

// actorOf returns actor, or "anonymous@PEER" when empty.
func actorOf(ctx context.Context, actor string) string {
	if actor != "" {
		return actor
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return "anonymous@" + p.Addr.String()
	}
	return "anonymous"
}
