package master_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"willow/auth"
	"willow/flex"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

func startConsole(t *testing.T) (*testMaster, *httptest.Server) {
	t.Helper()
	m := startMaster(t, testenv.StartRedis(t).Client(t), "master-1")
	ts := httptest.NewServer(m.srv.ConsoleHandler())
	t.Cleanup(ts.Close)
	return m, ts
}

// getJSON GETs url with tok in the X-Willow-Token header into out.
func getJSON(t *testing.T, url, tok string, out any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if tok != "" {
		req.Header.Set("X-Willow-Token", tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp
}

func postJSON(t *testing.T, url, tok string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("X-Willow-Token", tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestConsoleAPI(t *testing.T) {
	_, ts := startConsole(t)
	tests := []struct {
		name   string
		tok    string
		body   any
		code   int
		reason string
		msg    string
	}{
		{"no token", "", map[string]any{"level": "red", "reason": "x"}, 401, auth.ReasonNoCredentials, "token"},
		{"wrong token", "nope", map[string]any{"level": "red", "reason": "x"}, 401, auth.ReasonBadCredentials, "unknown"},
		{"read-only operator", readerToken, map[string]any{"level": "red", "reason": "x"}, 403, auth.ReasonMissingRole, "oncall"},
		{"self-declared actor", carolToken, map[string]any{"level": "red", "reason": "x", "actor": "mallory"}, 400, rpcstatus.ReasonBadRequest, "actor"},
		{"bad knob", token, map[string]any{"knobs": map[string]string{"timeline_delay_ratio": "2"}, "reason": "x"}, 400, flex.ReasonInvalidKnob, "timeline_delay_ratio"},
		{"bad for", token, map[string]any{"level": "blue", "reason": "x", "for": "soon"}, 400, master.ReasonInvalidExpiry, "soon"},
		{"unknown field", token, map[string]any{"levle": "blue"}, 400, rpcstatus.ReasonBadRequest, "levle"},
		{"stale version", token, map[string]any{"level": "blue", "reason": "x", "expected_version": 7}, 409, master.ReasonVersionConflict, "you expected 7"},
		{"dry run", token, map[string]any{"level": "blue", "reason": "x", "dry_run": true}, 200, "", ""},
		{"apply", token, map[string]any{"level": "blue", "reason": "x", "expected_version": 1, "for": "1h"}, 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := postJSON(t, ts.URL+"/api/flex", tt.tok, tt.body)
			if code != tt.code || (tt.reason != "" && out["reason"] != tt.reason) || !strings.Contains(mustString(out["error"]), tt.msg) {
				t.Fatalf("POST = %d %v, want %d %s %q", code, out, tt.code, tt.reason, tt.msg)
			}
		})
	}
	var st struct {
		Flex struct {
			Version   int64             `json:"version"`
			Level     string            `json:"level"`
			Knobs     map[string]string `json:"knobs"`
			ExpiresAt *string           `json:"expires_at"`
		} `json:"flex"`
		Levels   []string `json:"levels"`
		Writable bool     `json:"writable"`
	}
	resp := getJSON(t, ts.URL+"/api/flex", token, &st)
	if st.Flex.Version != 2 || st.Flex.Level != "blue" || st.Flex.ExpiresAt == nil || len(st.Levels) != 4 || !st.Writable {
		t.Fatalf("GET /api/flex = %+v", st)
	}
	// Reads need an operator (any role); the read-only one sees the
	// state as not writable.
	if resp := getJSON(t, ts.URL+"/api/flex", "", nil); resp.StatusCode != 401 {
		t.Fatalf("GET /api/flex without a token = %d, want 401", resp.StatusCode)
	}
	st.Writable = true
	if getJSON(t, ts.URL+"/api/flex", readerToken, &st); st.Writable || st.Flex.Level != "blue" {
		t.Fatalf("GET /api/flex as reader = %+v, want the state, not writable", st)
	}
	// Never a token in the URL; never framed.
	if resp := getJSON(t, ts.URL+"/api/flex?token="+token, "", nil); resp.StatusCode != 400 {
		t.Fatalf("GET /api/flex?token= = %d, want 400", resp.StatusCode)
	}
	if resp := getJSON(t, ts.URL+"/console", "", nil); resp.Header.Get("X-Frame-Options") != "DENY" ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("console headers = %v, want X-Frame-Options DENY and CSP frame-ancestors 'none'", resp.Header)
	}
	if code, out := postJSON(t, ts.URL+"/api/rollback", carolToken, map[string]any{"reason": "undo"}); code != 200 {
		t.Fatalf("rollback = %d %v", code, out)
	}
	var hist struct {
		Entries []map[string]any `json:"entries"`
	}
	getJSON(t, ts.URL+"/api/history", readerToken, &hist)
	// The audit names the authenticated operator.
	if len(hist.Entries) < 5 || hist.Entries[0]["action"] != "rollback" || hist.Entries[0]["actor"] != "carol" {
		t.Fatalf("history = %v", hist.Entries)
	}
	var nodes map[string]any
	resp = getJSON(t, ts.URL+"/api/nodes", readerToken, &nodes)
	if resp.StatusCode != 200 || nodes["regions"] == nil {
		t.Fatalf("nodes = %d %v", resp.StatusCode, nodes)
	}
	// The page and JSON go out gzip-compressed when the client asks.
	req, _ := http.NewRequest("GET", ts.URL+"/console", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("console Content-Encoding = %q, want gzip", resp.Header.Get("Content-Encoding"))
	}
}

func mustString(v any) string { s, _ := v.(string); return s }

// TestConsoleBrowser drives the console in headless Chromium: read-only
// without a token; with it, switch the level through the button and the
// confirmation showing the diff, then check a node received the level.
func TestConsoleBrowser(t *testing.T) {
	m, ts := startConsole(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", MasterAddr: m.node.Addr(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	nctx, ncancel := context.WithCancel(context.Background())
	defer ncancel()
	go n.Run(nctx)

	ctx := testenv.Browser(t, 60*time.Second)

	// With a read-only identity the page shows the state and is read-only.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/console"),
		chromedp.SendKeys(chromedp.ID("token"), readerToken),
		chromedp.WaitVisible(chromedp.ID("level-red")),
	); err != nil {
		t.Fatalf("open console: %v", err)
	}
	level, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("level")))
	if err != nil {
		t.Fatal(err)
	}
	disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("level-red").disabled`))
	if err != nil {
		t.Fatal(err)
	}
	if !disabled || level != "normal" {
		t.Fatalf("without token: red button disabled=%v, level %q", disabled, level)
	}

	// With carol's (oncall) token: switch to red through the confirmation.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("token").value = "", true)`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), carolToken),
		chromedp.WaitEnabled(chromedp.ID("level-red")),
		chromedp.SendKeys(chromedp.ID("reason"), "browser test: holiday peak"),
		chromedp.Click(chromedp.ID("level-red")),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")),
	); err != nil {
		t.Fatalf("switch level: %v", err)
	}
	diff, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("confirm-diff")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level", "normal", "red", "retries", "shed_ratio.prefetch"} {
		if !strings.Contains(diff, want) {
			t.Fatalf("confirmation diff %q lacks %q", diff, want)
		}
	}
	if cur := n.Knobs().Level; cur != "normal" {
		t.Fatalf("level changed before confirmation: %s", cur)
	}
	start := time.Now()
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("confirm-ok")),
		chromedp.WaitVisible(chromedp.CSS("#msg.ok")),
	); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("level").textContent === "red"`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("page level: %v", err)
	}
	for n.Knobs().Level != "red" {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("node did not receive level red: %+v", n.Knobs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("node runs level red %v after the confirmation click", time.Since(start))
	if k := n.Knobs(); k.Retries || k.ShedRatio["prefetch"] != 0.8 || k.TimelineDelayRatio != 0.7 {
		t.Fatalf("node knobs = %+v", k)
	}
	// Override one knob through the select, the value field and the
	// confirmation.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("knob-name"), "image_quality"),
		chromedp.SendKeys(chromedp.ID("knob-value"), "40"),
		chromedp.Click(chromedp.ID("knob-apply")),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")),
	); err != nil {
		t.Fatalf("override knob: %v", err)
	}
	if diff, _ = chromedp.Run(ctx, chromedp.Text(chromedp.ID("confirm-diff"))); !strings.Contains(diff, "image_quality") || !strings.Contains(diff, "40") {
		t.Fatalf("knob confirmation diff = %q", diff)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("confirm-ok"))); err != nil {
		t.Fatal(err)
	}
	for n.Knobs().ImageQuality != 40 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("node did not receive image_quality=40: %+v", n.Knobs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("history").textContent.includes("carol")`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("history on the page: %v", err)
	}

	// The change is audited with the authenticated name.
	h, err := m.client.FlexHistory(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := h.GetEntries()[1]; !e.GetAccepted() || e.GetAction() != "set" || e.GetActor() != "carol" || e.GetReason() != "browser test: holiday peak" {
		t.Fatalf("audit = %v", e)
	}
}

func TestConsoleListsActiveDrills(t *testing.T) {
	m, ts := startConsole(t)
	get := func() []map[string]any {
		var out struct {
			Drills []map[string]any `json:"drills"`
		}
		if resp := getJSON(t, ts.URL+"/api/drills", readerToken, &out); resp.StatusCode != 200 {
			t.Fatalf("GET /api/drills: %d", resp.StatusCode)
		}
		return out.Drills
	}
	if d := get(); len(d) != 0 {
		t.Fatalf("drills before any: %v", d)
	}
	if _, err := m.client.Register(context.Background(), &willowv1.RegisterRequest{Node: &willowv1.NodeInfo{
		Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	_, err := m.client.SetDrill(context.Background(), &willowv1.SetDrillRequest{Token: token, ForMs: 60_000,
		Drill: &willowv1.Drill{NodeAddr: "upload-a-1", Kind: "latency", LatencyMs: 200, Reason: "drill test"}})
	if err != nil {
		t.Fatal(err)
	}
	d := get()
	if len(d) != 1 || d[0]["kind"] != "latency" || d[0]["node"] != "127.0.0.1:1" || d[0]["reason"] != "drill test" {
		t.Fatalf("drills = %v", d)
	}
	page, _ := http.Get(ts.URL + "/console")
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(body), "Active drills") {
		t.Fatal("the console page has no drills section")
	}
}
