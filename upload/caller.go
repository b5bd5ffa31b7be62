package upload

import (
	"context"
	"time"

	"willow/auth"
	willowv1 "willow/proto/willow/v1"
)

// Who may do what on the upload front (see Methods for the classes):
//
//   - Every upload call (Begin, Chunks, Status, Commit) carries the
//     client's upload token in "authorization: Bearer TOKEN"; the guard
//     verifies it on every call and every Chunks stream. The token's user
//     is the upload's user: a call naming another user is
//     PERMISSION_DENIED other_user, and an upload is found by (token
//     user, upload ID) in every lookup, so one user's upload ID never
//     reaches or blocks another user's.
//   - GetMedia answers the owner and nodes with every field; anyone else
//     gets the media without its owner fields (user, sha256).
//   - Drain(wait) stops at DefaultDrainWait (or the caller's earlier
//     deadline): it can never hang.

// DefaultDrainWait bounds a Drain with wait set.
const DefaultDrainWait = 2 * time.Minute

// beginUser returns the user a Begin acts for. With an authenticated
// client (the guard verified its token in the call's metadata) that is the
// token's user, and the request's user (when set) and business must be
// the token's. Without a Caller (an Open guard in in-process tests, or the
// HTTP upload routes, which pass the request's own token) tok is verified
// and must name user and business.
func (s *Server) beginUser(ctx context.Context, user, business, tok string) (string, error) {
	if c, ok := auth.FromContext(ctx); ok {
		u, err := auth.ActAs(ctx, user)
		if err != nil {
			return "", err
		}
		if c.Class == auth.Client && business != c.Business {
			return "", fail(auth.ReasonOtherUser,
				"this upload token is for business %q, not %q", c.Business, business)
		}
		return u, nil
	}
	if user == "" {
		return "", fail(ReasonBadUser, "user is required")
	}
	claims, err := s.verifyToken(tok)
	if err != nil {
		return "", err
	}
	if claims.User != user || claims.Business != business {
		return "", fail(ReasonTokenInvalid, "upload token is for another user or business")
	}
	return user, nil
}

// ownerView strips the owner fields from m unless ctx's caller is its
// owner or a node.
func ownerView(ctx context.Context, m *willowv1.Media) *willowv1.Media {
	c, ok := auth.FromContext(ctx)
	if !ok || c.Class == auth.Node || (c.Class == auth.Client && c.User == m.GetUser()) {
		return m
	}
	m.User, m.Sha256 = "", ""
	return m
}

// drainCtx bounds a waiting Drain.
func (s *Server) drainCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.cfg.DrainWait
	if d <= 0 {
		d = DefaultDrainWait
	}
	return context.WithTimeout(ctx, d)
}
