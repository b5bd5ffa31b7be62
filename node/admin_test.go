package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"willow/auth"
	"willow/node"
)

// The admin port's runtime profiles are an on-call operator's: public
// callers get 401, a read-only operator 403, an on-call operator the
// profile; a node without credentials refuses them to everyone. /metrics
// and /healthz stay public.
func TestAdminPprofIsForOncall(t *testing.T) {
	ops, err := (*auth.Operators)(nil).With("ann", "ann-token", auth.RoleOncall)
	if err != nil {
		t.Fatal(err)
	}
	if ops, err = ops.With("rob", "rob-token", auth.RoleRead); err != nil {
		t.Fatal(err)
	}
	get := func(n *node.Node, path, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+n.AdminAddr()+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	run := func(cfg node.Config) *node.Node {
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return n
	}
	n := run(node.Config{ID: "edge-p", Role: "edgecache", Region: "a", ShutdownGrace: time.Second,
		Auth: &auth.Config{ClusterSecret: "s3cret", Operators: ops}})
	for _, c := range []struct {
		path, tok string
		code      int
		body      string
	}{
		{"/debug/pprof/goroutine?debug=1", "", http.StatusUnauthorized, "credentials"},
		{"/debug/pprof/goroutine?debug=1", "wrong", http.StatusUnauthorized, "unknown token"},
		{"/debug/pprof/goroutine?debug=1", "rob-token", http.StatusForbidden, "lacks role oncall"},
		{"/debug/pprof/heap?debug=1", "rob-token", http.StatusForbidden, "lacks role oncall"},
		{"/debug/pprof/goroutine?debug=1", "ann-token", http.StatusOK, "goroutine profile: total"},
		{"/debug/pprof/heap?debug=1", "ann-token", http.StatusOK, "heap profile:"},
		{"/debug/pprof/", "ann-token", http.StatusOK, "goroutine"},
		{"/debug/pprof/cmdline", "", http.StatusUnauthorized, "credentials"},
		{"/metrics", "", http.StatusOK, "go_goroutines"},
		{"/healthz", "", http.StatusOK, "ok"},
	} {
		code, body := get(n, c.path, c.tok)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s (token %q) = %d %.80q, want %d with %q", c.path, c.tok, code, body, c.code, c.body)
		}
	}
	// No credentials configured: profiles refused, fail closed.
	bare := run(node.Config{ID: "edge-q", Role: "edgecache", Region: "a", ShutdownGrace: time.Second})
	if code, body := get(bare, "/debug/pprof/goroutine?debug=1", "ann-token"); code != http.StatusForbidden {
		t.Errorf("pprof on a node without credentials = %d %.80q, want 403", code, body)
	}
	if code, _ := get(bare, "/metrics", ""); code != http.StatusOK {
		t.Errorf("/metrics on a node without credentials = %d", code)
	}
	if _, ok := node.AdminRoutes()[node.RoutePprof]; !ok {
		t.Error("RoutePprof not in AdminRoutes")
	}
}
