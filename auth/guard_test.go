package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/rpcstatus"
	"willow/token"
)

func TestGuardAuthorize(t *testing.T) {
	secret := []byte("upload-secret")
	ops, err := auth.ParseOperators([]byte(auth.OperatorLine("alice", "alice-tok", auth.RoleOncall) +
		auth.OperatorLine("bob", "bob-tok", auth.RoleRead)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	g, err := auth.New(auth.Config{ClusterSecret: "cs", UploadSecret: secret, Operators: ops, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Declare(auth.Table{
		"/t.S/Client":  {Classes: auth.Client},
		"/t.S/Read":    {Classes: auth.Operator | auth.Node},
		"/t.S/Change":  {Classes: auth.Operator, Role: auth.RoleOncall},
		"/t.S/NodeOne": {Classes: auth.Node},
	}); err != nil {
		t.Fatal(err)
	}
	if err := g.Declare(auth.Table{"/t.S/Client": {Classes: auth.Node}}); err == nil {
		t.Fatal("a method declared twice with another rule was accepted")
	}
	alice, _ := token.Sign(secret, "alice", "moments", now.Add(time.Hour))
	old, _ := token.Sign(secret, "alice", "moments", now.Add(-time.Second))
	forged, _ := token.Sign([]byte("other"), "alice", "moments", now.Add(time.Hour))
	node := []string{"x-willow-cluster-secret", "cs", "x-willow-node-id", "upload-a-1", "x-willow-node-role", "upload"}
	for _, tc := range []struct {
		name, method string
		md           []string
		code         codes.Code
		reason       string
		want         string // Caller.String() on success
	}{
		{"public health", "/grpc.health.v1.Health/Check", nil, codes.OK, "", ""},
		{"unclassified", "/t.S/New", node, codes.PermissionDenied, auth.ReasonUnclassified, ""},
		{"nothing", "/t.S/Client", nil, codes.Unauthenticated, auth.ReasonNoCredentials, ""},
		{"client", "/t.S/Client", []string{"authorization", "Bearer " + alice}, codes.OK, "", "client alice"},
		{"expired", "/t.S/Client", []string{"authorization", "Bearer " + old}, codes.Unauthenticated, auth.ReasonTokenExpired, ""},
		{"forged", "/t.S/Client", []string{"authorization", "Bearer " + forged}, codes.Unauthenticated, auth.ReasonBadCredentials, ""},
		{"not bearer", "/t.S/Client", []string{"authorization", "Basic " + alice}, codes.Unauthenticated, auth.ReasonBadCredentials, ""},
		{"client on operator call", "/t.S/Read", []string{"authorization", "Bearer " + alice}, codes.PermissionDenied, auth.ReasonWrongClass, ""},
		{"reader reads", "/t.S/Read", []string{"authorization", "Bearer bob-tok"}, codes.OK, "", "operator bob"},
		{"reader changes", "/t.S/Change", []string{"authorization", "Bearer bob-tok"}, codes.PermissionDenied, auth.ReasonMissingRole, ""},
		{"oncall changes", "/t.S/Change", []string{"authorization", "Bearer alice-tok"}, codes.OK, "", "operator alice"},
		{"unknown operator", "/t.S/Change", []string{"authorization", "Bearer mallory"}, codes.Unauthenticated, auth.ReasonBadCredentials, ""},
		{"node", "/t.S/NodeOne", node, codes.OK, "", "node upload-a-1"},
		{"wrong secret", "/t.S/NodeOne", []string{"x-willow-cluster-secret", "guess", "x-willow-node-id", "n", "x-willow-node-role", "upload"}, codes.Unauthenticated, auth.ReasonBadCredentials, ""},
		{"secret without id", "/t.S/NodeOne", []string{"x-willow-cluster-secret", "cs"}, codes.Unauthenticated, auth.ReasonBadCredentials, ""},
		{"operator on node call", "/t.S/NodeOne", []string{"authorization", "Bearer alice-tok"}, codes.PermissionDenied, auth.ReasonWrongClass, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc.md...))
			ctx, err := g.Authorize(ctx, tc.method)
			if status.Code(err) != tc.code || rpcstatus.Reason(err) != tc.reason {
				t.Fatalf("err %v (reason %q), want %v %q", err, rpcstatus.Reason(err), tc.code, tc.reason)
			}
			c, ok := auth.FromContext(ctx)
			if tc.want != "" && (!ok || c.String() != tc.want) {
				t.Fatalf("caller %v %v, want %s", c, ok, tc.want)
			}
		})
	}
}

func TestOpenGuardStillClassifies(t *testing.T) {
	g := auth.Open()
	_ = g.Declare(auth.Table{"/t.S/A": {Classes: auth.Client}})
	if _, err := g.Authorize(context.Background(), "/t.S/A"); err != nil {
		t.Fatalf("open guard, classified method: %v", err)
	}
	if _, err := g.Authorize(context.Background(), "/t.S/B"); rpcstatus.Reason(err) != auth.ReasonUnclassified {
		t.Fatalf("open guard, unclassified method: %v", err)
	}
	// A guard with no secrets fails closed: only certificates pass.
	g2, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_ = g2.Declare(auth.Table{"/t.S/A": {Classes: auth.Client | auth.Node}})
	md := metadata.Pairs("x-willow-cluster-secret", "", "authorization", "Bearer x")
	if _, err := g2.Authorize(metadata.NewIncomingContext(context.Background(), md), "/t.S/A"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("secretless guard: %v", err)
	}
}

func TestRolesAndActAs(t *testing.T) {
	admin := auth.Caller{Class: auth.Operator, Name: "a", Roles: []auth.Role{auth.RoleAdmin}}
	if !admin.Has(auth.RoleOncall) || !admin.Has(auth.RoleRead) {
		t.Error("admin should imply oncall and read")
	}
	reader := auth.Caller{Class: auth.Operator, Name: "r", Roles: []auth.Role{auth.RoleRead}}
	if reader.Has(auth.RoleOncall) {
		t.Error("read must not imply oncall")
	}
	ctx := auth.NewContext(context.Background(), auth.Caller{Class: auth.Client, User: "alice"})
	if u, err := auth.ActAs(ctx, ""); err != nil || u != "alice" {
		t.Errorf("ActAs own = %q %v", u, err)
	}
	if _, err := auth.ActAs(ctx, "bob"); rpcstatus.Reason(err) != auth.ReasonOtherUser {
		t.Errorf("ActAs other = %v", err)
	}
	nctx := auth.NewContext(context.Background(), auth.Caller{Class: auth.Node, NodeID: "n"})
	if u, err := auth.ActAs(nctx, "bob"); err != nil || u != "bob" {
		t.Errorf("node ActAs = %q %v", u, err)
	}
}

func TestParseOperators(t *testing.T) {
	h := auth.HashToken("t")
	for _, bad := range []string{
		"alice: {sha256: nothex, roles: [read]}",
		"alice: {sha256: " + h + ", roles: [root]}",
		"alice: {sha256: " + h + ", roles: []}",
		"alice: {sha256: " + h + ", roles: [read], extra: 1}",
		"alice: {sha256: " + h + ", roles: [read]}\nbob: {sha256: " + h + ", roles: [read]}",
		"bad name!: {sha256: " + h + ", roles: [read]}",
	} {
		if _, err := auth.ParseOperators([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	ops, err := auth.ParseOperators([]byte("# comment\n" + auth.OperatorLine("alice", "t", auth.RoleOncall)))
	if err != nil || ops.Len() != 1 || strings.Join(ops.Names(), ",") != "alice" {
		t.Fatalf("ops %v %v", ops.Names(), err)
	}
	if id, ok := ops.Lookup("t"); !ok || id.Name != "alice" {
		t.Fatalf("lookup = %v %v", id, ok)
	}
	if _, ok := ops.Lookup("u"); ok {
		t.Fatal("wrong token found an identity")
	}
}
