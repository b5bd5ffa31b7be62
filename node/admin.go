package node

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"willow/auth"
)

// Admin HTTP routes of every node, as they appear in AdminRoutes.
const (
	RouteMetrics = "HTTP GET /metrics"
	RouteHealthz = "HTTP GET /healthz"
	RoutePprof   = "HTTP GET /debug/pprof/"
)

// AdminRoutes is the caller-class table of the admin port's routes
// (package auth): /metrics and /healthz are public (Prometheus, Kubernetes
// probes); the Go runtime profiles under /debug/pprof/ (heap, goroutine,
// CPU profile, trace) are an on-call operator's, with the operator token as
// Authorization: Bearer TOKEN: a goroutine dump shows the process's
// internals and a CPU profile or trace costs CPU while it runs.
func AdminRoutes() auth.Table {
	return auth.Table{
		RouteMetrics: {Classes: auth.Public},
		RouteHealthz: {Classes: auth.Public},
		RoutePprof:   {Classes: auth.Operator, Role: auth.RoleOncall},
	}
}

var adminRoutes = AdminRoutes()

// adminGuard serves h to callers that route's rule admits. A route for
// operators is refused on a node without credentials (Config.Auth nil):
// it fails closed instead of serving profiles to anyone.
func (n *Node) adminGuard(route string, h http.Handler) http.Handler {
	rule := adminRoutes[route]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if rule.Classes&auth.Public == 0 {
			if n.cfg.Auth == nil {
				http.Error(w, "this node has no operator credentials configured; "+route+" is for operators", http.StatusForbidden)
				return
			}
			if _, err := n.guard.AuthorizeHTTP(r, rule); err != nil {
				http.Error(w, fmt.Sprint(err), auth.HTTPStatus(err))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// handlePprof adds the runtime profiles of net/http/pprof under
// /debug/pprof/ to the admin mux, behind RoutePprof.
func (n *Node) handlePprof() {
	n.adminMx.Handle("/debug/pprof/", n.adminGuard(RoutePprof, http.HandlerFunc(pprof.Index)))
	for name, h := range map[string]http.HandlerFunc{
		"cmdline": pprof.Cmdline, "profile": pprof.Profile, "symbol": pprof.Symbol, "trace": pprof.Trace,
	} {
		n.adminMx.Handle("/debug/pprof/"+name, n.adminGuard(RoutePprof, h))
	}
}
