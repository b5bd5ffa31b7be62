package master

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/flex"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

//go:embed static/console.html
var consoleHTML []byte

// consoleTimeout bounds every console request.
const consoleTimeout = 5 * time.Second

// ConsoleHandler returns the on-call web console: the page at /console
// and its JSON endpoints, gzip-compressed (klauspost/compress gzhttp):
//
//	GET  /api/flex      current state, level plans, knob names, writable
//	GET  /api/nodes     nodes by region with health, load and gauges
//	GET  /api/history   audit log, newest first (?limit=N)
//	GET  /api/auto      auto-flex mode, pause, proposal, rules, schedules
//	POST /api/flex      a change: {"level","knobs","scope","reason","for",
//	                    "expected_version","dry_run","actor"}
//	POST /api/rollback  {"reason","expected_version","actor"}
//
// Every endpoint needs a named operator's token in the X-Willow-Token
// header (or "Authorization: Bearer T"): reads need role read, changes
// role oncall, and the audit records the token's name. The token is never
// accepted in the URL (a ?token= query is refused with 400: URLs end up
// in logs and histories). Requests carrying a token in a custom header
// cannot be forged cross-site (CSRF); every response forbids framing
// (X-Frame-Options: DENY, CSP frame-ancestors 'none'). Errors are JSON
// {"error","code","reason"} with 400, 401, 403, 409, 412 or 503.
func (s *Server) ConsoleHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console", http.StatusFound)
	})
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(consoleHTML)
	})
	mux.HandleFunc("GET /api/flex", s.consoleAuth(auth.RoleRead, s.apiFlex))
	mux.HandleFunc("GET /api/nodes", s.consoleAuth(auth.RoleRead, s.apiNodes))
	mux.HandleFunc("GET /api/history", s.consoleAuth(auth.RoleRead, s.apiHistory))
	mux.HandleFunc("GET /api/drills", s.consoleAuth(auth.RoleRead, s.apiDrills))
	mux.HandleFunc("POST /api/flex", s.consoleAuth(auth.RoleOncall, s.apiSetFlex))
	mux.HandleFunc("POST /api/rollback", s.consoleAuth(auth.RoleOncall, s.apiRollback))
	s.trendRoutes(mux) // console_trends.go
	s.consoleAuto(mux) // console_auto.go: GET /api/auto
	s.uploadPage(mux)
	return consoleHeaders(gzhttp.GzipHandler(mux))
}

// consoleHeaders refuses tokens in the URL and forbids framing.
func consoleHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if r.URL.Query().Has("token") {
			consoleError(w, rpcstatus.New(codes.InvalidArgument, ReasonTokenInURL,
				"never put a token in the URL: enter it in the page (it is sent in the X-Willow-Token header)"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// consoleAuth authenticates a console request as an operator with role
// and runs h with the Caller in the request's context.
func (s *Server) consoleAuth(role auth.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.operator(r.Context(), consoleToken(r), role)
		if err != nil {
			if role == auth.RoleOncall && c.Class == auth.Operator {
				// A read-only operator trying a change: audit it.
				cur, _, _ := s.current()
				s.audit(&willowv1.AuditEntry{Actor: actorOf(c), Action: "console " + r.URL.Path,
					FromVersion: cur.Version, ToVersion: cur.Version, Error: rpcstatus.Line(err)})
			}
			consoleError(w, err)
			return
		}
		h(w, r.WithContext(auth.NewContext(r.Context(), c)))
	}
}

func writeConsoleJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// consoleError writes err as JSON with the HTTP code of its gRPC code; the
// one place gRPC errors become HTTP ones.
func consoleError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Aborted:
		code = http.StatusConflict
	case codes.FailedPrecondition:
		code = http.StatusPreconditionFailed
	case codes.Unavailable, codes.DeadlineExceeded:
		code = http.StatusServiceUnavailable
	}
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	writeConsoleJSON(w, code, map[string]string{"error": msg, "code": status.Code(err).String(), "reason": rpcstatus.Reason(err)})
}

type consoleFlex struct {
	Flex       flex.Status                  `json:"flex"`
	Levels     []string                     `json:"levels"`
	Plans      map[string]map[string]string `json:"plans"`
	KnobNames  []string                     `json:"knob_names"`
	Businesses []string                     `json:"businesses"`
	// Writable says whether the caller may change the flex state (it has
	// role oncall).
	Writable bool `json:"writable"`
}

func (s *Server) apiFlex(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	st, err := s.GetFlex(ctx, &willowv1.GetFlexRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	out := consoleFlex{Flex: flex.NewStatus(st), Levels: s.plans.Levels(), Plans: map[string]map[string]string{},
		KnobNames: s.plans.KnobNames(), Businesses: s.plans.Businesses(), Writable: callerHas(r.Context(), auth.RoleOncall)}
	for _, l := range out.Levels {
		out.Plans[l], _ = s.plans.Plan(l)
	}
	writeConsoleJSON(w, http.StatusOK, out)
}

type consoleNode struct {
	ID          string             `json:"id"`
	Role        string             `json:"role"`
	Region      string             `json:"region"`
	Zone        string             `json:"zone"`
	Group       string             `json:"group,omitempty"`
	Addr        string             `json:"addr"`
	State       string             `json:"state"`
	Reason      string             `json:"reason,omitempty"`
	CPU         float64            `json:"cpu"`
	InFlight    int32              `json:"in_flight"`
	QueueMs     float64            `json:"queue_ms"`
	SuccessRate float64            `json:"success_rate"`
	Requests    int64              `json:"requests"`
	LastBeatMs  int64              `json:"last_heartbeat_unix_ms"`
	Gauges      map[string]float64 `json:"gauges,omitempty"`
}

type consoleRegion struct {
	Region  string        `json:"region"`
	Healthy int           `json:"healthy"`
	Total   int           `json:"total"`
	Nodes   []consoleNode `json:"nodes"`
}

type consoleNodes struct {
	Regions []consoleRegion `json:"regions"`
	// Counters sums, over all nodes, the gauges about shed, spilled and
	// held work (names containing "shed", "spill", "pool" or "held").
	Counters map[string]float64 `json:"counters"`
	Error    string             `json:"error,omitempty"`
}

func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	out := consoleNodes{Regions: []consoleRegion{}, Counters: map[string]float64{}}
	resp, err := s.ListNodes(ctx, &willowv1.ListNodesRequest{Role: r.URL.Query().Get("role")})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			out.Error = "the node registry is not available on this master"
		} else {
			out.Error = rpcstatus.Line(err)
		}
		writeConsoleJSON(w, http.StatusOK, out)
		return
	}
	byRegion := map[string]*consoleRegion{}
	for _, ns := range resp.GetNodes() {
		info, load := ns.GetNode(), ns.GetLoad()
		n := consoleNode{ID: info.GetId(), Role: info.GetRole(), Region: info.GetRegion(), Zone: info.GetZone(),
			Group: info.GetGroup(), Addr: info.GetAddr(), State: ns.GetState(), Reason: ns.GetReason(),
			CPU: load.GetCpu(), InFlight: load.GetInFlight(), QueueMs: load.GetQueueMs(), SuccessRate: load.GetSuccessRate(),
			Requests: load.GetRequests(), LastBeatMs: ns.GetLastHeartbeatUnixMs(), Gauges: load.GetGauges()}
		reg := byRegion[n.Region]
		if reg == nil {
			reg = &consoleRegion{Region: n.Region}
			byRegion[n.Region] = reg
		}
		reg.Total++
		if n.State == "healthy" {
			reg.Healthy++
		}
		reg.Nodes = append(reg.Nodes, n)
		for g, v := range n.Gauges {
			if strings.Contains(g, "shed") || strings.Contains(g, "spill") || strings.Contains(g, "held") || strings.Contains(g, "pool") {
				out.Counters[g] += v
			}
		}
	}
	for _, reg := range byRegion {
		sort.Slice(reg.Nodes, func(i, j int) bool {
			if reg.Nodes[i].Role != reg.Nodes[j].Role {
				return reg.Nodes[i].Role < reg.Nodes[j].Role
			}
			return reg.Nodes[i].ID < reg.Nodes[j].ID
		})
		out.Regions = append(out.Regions, *reg)
	}
	sort.Slice(out.Regions, func(i, j int) bool { return out.Regions[i].Region < out.Regions[j].Region })
	writeConsoleJSON(w, http.StatusOK, out)
}

func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	resp, err := s.FlexHistory(ctx, &willowv1.FlexHistoryRequest{Limit: int32(limit)})
	if err != nil {
		consoleError(w, err)
		return
	}
	out := flex.AuditRecords(resp.GetEntries())
	writeConsoleJSON(w, http.StatusOK, map[string]any{"entries": out})
}

// apiDrills lists the active drills (fault injection ordered through
// `willow drill`).
func (s *Server) apiDrills(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	resp, err := s.ListDrills(ctx, &willowv1.ListDrillsRequest{})
	if err != nil {
		consoleError(w, err)
		return
	}
	type drill struct {
		Node       string  `json:"node"`
		Kind       string  `json:"kind"`
		LatencyMs  int64   `json:"latency_ms,omitempty"`
		ErrorRatio float64 `json:"error_ratio,omitempty"`
		ExpiresAt  int64   `json:"expires_at_unix_ms"`
		Actor      string  `json:"actor"`
		Reason     string  `json:"reason,omitempty"`
	}
	out := []drill{}
	for _, d := range resp.GetDrills() {
		out = append(out, drill{d.GetNodeAddr(), d.GetKind(), d.GetLatencyMs(), d.GetErrorRatio(), d.GetExpiresAtUnixMs(), d.GetActor(), d.GetReason()})
	}
	writeConsoleJSON(w, http.StatusOK, map[string]any{"drills": out})
}

// consoleToken returns the on-call token of a console request.
func consoleToken(r *http.Request) string {
	if t := r.Header.Get("X-Willow-Token"); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return t
	}
	return ""
}

// callerHas reports whether ctx's caller has role.
func callerHas(ctx context.Context, role auth.Role) bool {
	c, _ := auth.FromContext(ctx)
	return c.Has(role)
}

type consoleChange struct {
	Level           string            `json:"level"`
	Knobs           map[string]string `json:"knobs"`
	Scope           string            `json:"scope"`
	Reason          string            `json:"reason"`
	For             string            `json:"for"` // Go duration, e.g. "2h"
	ExpectedVersion int64             `json:"expected_version"`
	DryRun          bool              `json:"dry_run"`
}

type consoleChangeResult struct {
	Flex     flex.Status   `json:"flex"`
	Previous flex.Status   `json:"previous"`
	Changes  []flex.Change `json:"changes"`
	DryRun   bool          `json:"dry_run,omitempty"`
}

const maxConsoleBody = 64 << 10

func decodeConsole(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxConsoleBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return rpcstatus.New(codes.InvalidArgument, rpcstatus.ReasonBadRequest, "request body: %v", err)
	}
	return nil
}

func (s *Server) apiSetFlex(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	var c consoleChange
	if err := decodeConsole(r, &c); err != nil {
		consoleError(w, err)
		return
	}
	var forMs int64
	if c.For != "" {
		d, err := time.ParseDuration(c.For)
		if err != nil {
			consoleError(w, rpcstatus.New(codes.InvalidArgument, ReasonInvalidExpiry, "for %q: %v", c.For, err))
			return
		}
		forMs = d.Milliseconds()
		if d < 0 {
			forMs = min(forMs, -1)
		}
	}
	req := &willowv1.SetFlexRequest{ExpectedVersion: c.ExpectedVersion, Level: c.Level,
		Knobs: c.Knobs, Scope: c.Scope, Reason: c.Reason, ForMs: forMs, DryRun: c.DryRun}
	resp, err := s.SetFlex(ctx, req)
	if err != nil {
		consoleError(w, err)
		return
	}
	writeConsoleJSON(w, http.StatusOK, consoleChangeResult{Flex: flex.NewStatus(resp.GetFlex()),
		Previous: flex.NewStatus(resp.GetPrevious()), Changes: flex.Diff(resp.GetPrevious(), resp.GetFlex()), DryRun: c.DryRun})
}

func (s *Server) apiRollback(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	var c struct {
		Reason          string `json:"reason"`
		ExpectedVersion int64  `json:"expected_version"`
	}
	if err := decodeConsole(r, &c); err != nil {
		consoleError(w, err)
		return
	}
	resp, err := s.RollbackFlex(ctx, &willowv1.RollbackFlexRequest{ExpectedVersion: c.ExpectedVersion, Reason: c.Reason})
	if err != nil {
		consoleError(w, err)
		return
	}
	writeConsoleJSON(w, http.StatusOK, consoleChangeResult{Flex: flex.NewStatus(resp.GetFlex()),
		Previous: flex.NewStatus(resp.GetPrevious()), Changes: flex.Diff(resp.GetPrevious(), resp.GetFlex())})
}
