package auth

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"willow/rpcstatus"
)

// Class is a set of caller classes: a Caller has exactly one, a Rule
// accepts several (Client|Node).
type Class uint8

// The caller classes.
const (
	Public Class = 1 << iota
	Client
	Operator
	Node
)

// String names the classes in c, "client|node".
func (c Class) String() string {
	var parts []string
	for _, x := range []struct {
		c    Class
		name string
	}{{Public, "public"}, {Client, "client"}, {Operator, "operator"}, {Node, "node"}} {
		if c&x.c != 0 {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Role is an operator role. Admin implies Oncall, Oncall implies Read.
type Role string

// The operator roles.
const (
	RoleRead   Role = "read"
	RoleOncall Role = "oncall"
	RoleAdmin  Role = "admin"
)

var roleRank = map[Role]int{RoleRead: 1, RoleOncall: 2, RoleAdmin: 3}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return roleRank[r] > 0 }

// Caller is an authenticated identity.
type Caller struct {
	Class Class
	// User and Business: a client's, from its upload token.
	User     string
	Business string
	// Name and Roles: an operator's, from the identities file.
	Name  string
	Roles []Role
	// NodeID and NodeRole: a node's, from its certificate or (without TLS)
	// its metadata next to the cluster secret.
	NodeID   string
	NodeRole string
	// Instance is a node's per-process key (without TLS) and Credential a
	// fingerprint of what authenticated it ("secret", or "cert:" + the
	// SHA-256 of the certificate): the master binds a registered node ID
	// to them.
	Instance   string
	Credential string
}

// Has reports whether an operator caller has role r (admin implies
// oncall, oncall implies read). Non-operators have no role.
func (c Caller) Has(r Role) bool {
	if c.Class != Operator {
		return false
	}
	for _, have := range c.Roles {
		if roleRank[have] >= roleRank[r] {
			return true
		}
	}
	return false
}

// String is a short description for logs and audit records:
// "client alice", "operator bob", "node upload-a-1".
func (c Caller) String() string {
	switch c.Class {
	case Client:
		return "client " + c.User
	case Operator:
		return "operator " + c.Name
	case Node:
		return "node " + c.NodeID
	}
	return c.Class.String()
}

type ctxKey struct{}

// callerContext is ctx carrying a Caller: one allocation per call, where
// context.WithValue with the Caller boxed in an interface takes two.
type callerContext struct {
	context.Context
	c Caller
}

func (x *callerContext) Value(key any) any {
	if key == (ctxKey{}) {
		return &x.c
	}
	return x.Context.Value(key)
}

// NewContext returns ctx carrying c.
func NewContext(ctx context.Context, c Caller) context.Context {
	return &callerContext{Context: ctx, c: c}
}

// FromContext returns the authenticated caller of ctx; ok is false when
// no Guard authenticated it (an Open guard, or a context not from a call).
func FromContext(ctx context.Context) (c Caller, ok bool) {
	if p, ok := ctx.Value(ctxKey{}).(*Caller); ok {
		return *p, true
	}
	return Caller{}, false
}

// ActAs checks that the caller of ctx may act for user: a client only for
// its own user, a node or an operator for anyone. It returns the user to
// act for (the client's own when user is empty) or PERMISSION_DENIED
// other_user. Without a Caller (Open guard) it returns user unchanged.
func ActAs(ctx context.Context, user string) (string, error) {
	c, ok := FromContext(ctx)
	if !ok || c.Class != Client {
		return user, nil
	}
	if user != "" && user != c.User {
		return "", rpcstatus.New(codes.PermissionDenied, ReasonOtherUser,
			"this credential is %q's: it cannot act for user %q", c.User, user)
	}
	return c.User, nil
}

// IsNode reports whether ctx's caller is a node, or there is no Caller
// (Open guard: in-process tests trust every caller).
func IsNode(ctx context.Context) bool {
	c, ok := FromContext(ctx)
	return !ok || c.Class == Node
}

// roleOK reports whether roles contains only valid roles.
func roleOK(roles []Role) bool {
	return len(roles) > 0 && !slices.ContainsFunc(roles, func(r Role) bool { return !r.Valid() })
}
