package master_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"willow/internal/testenv"
	"willow/master"
	willowv1 "willow/proto/willow/v1"
)

// TestConsoleAutoFlex: the console's auto-flex section shows the mode, the
// dry-run proposal, a human's pause (until when, by whom) and the
// scheduled changes, in headless Chromium and in GET /api/auto, which
// refuses a caller without a valid token.
func TestConsoleAutoFlex(t *testing.T) {
	rdb := testenv.StartRedisKind(t, "server").Client(t)
	policy := queuePolicy(t)
	m := startAutoMaster(t, rdb, "master-1", policy)
	ts := httptest.NewServer(m.srv.ConsoleHandler())
	t.Cleanup(ts.Close)
	startQueueNode(t, m, func() float64 { return 1800 })

	// The attacker's side: no token, a wrong token, a token in the URL.
	for _, tc := range []struct {
		url, tok string
		want     int
	}{
		{ts.URL + "/api/auto", "", http.StatusUnauthorized},
		{ts.URL + "/api/auto", "not-a-token", http.StatusUnauthorized},
		{ts.URL + "/api/auto?token=" + readerToken, "", http.StatusBadRequest},
	} {
		var body map[string]any
		if resp := getJSON(t, tc.url, tc.tok, &body); resp.StatusCode != tc.want || body["mode"] != nil {
			t.Fatalf("GET %s with token %q: %d %v, want %d and no state", tc.url, tc.tok, resp.StatusCode, body, tc.want)
		}
	}

	if _, err := m.client.SetFlexAuto(ctxT(t), &willowv1.SetFlexAutoRequest{Token: token, Mode: master.AutoDryRun, Reason: "console test"}); err != nil {
		t.Fatal(err)
	}
	var view struct {
		Mode     string `json:"mode"`
		Proposal string `json:"proposal"`
		Paused   *struct {
			Until, By, Reason string
		} `json:"paused"`
		Rules []struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		} `json:"rules"`
		Schedules []struct {
			ID, State, Change, Reason string
		} `json:"schedules"`
	}
	regWait(t, 15*time.Second, "a dry-run proposal in /api/auto", func() bool {
		resp := getJSON(t, ts.URL+"/api/auto", readerToken, &view)
		return resp.StatusCode == 200 && strings.HasPrefix(view.Proposal, "auto-flex would set blue: cq: compress queue p99 1.8 s > 1 s")
	})
	if view.Mode != master.AutoDryRun || view.Paused != nil || len(view.Rules) != 1 || view.Rules[0].Value != 1800 {
		t.Fatalf("/api/auto = %+v", view)
	}
	// A human's change pauses auto-flex; a change is scheduled.
	if _, err := m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Token: carolToken, Knobs: map[string]string{"image_quality": "70"},
		Reason: "carol holds"}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	if _, err := m.client.ScheduleFlex(ctxT(t), &willowv1.ScheduleFlexRequest{Token: token, Change: &willowv1.ScheduledChange{
		AtUnixMs: at.UnixMilli(), Level: "yellow", ForMs: 3_600_000, Reason: "peak at eight"}}); err != nil {
		t.Fatal(err)
	}
	if resp := getJSON(t, ts.URL+"/api/auto", readerToken, &view); resp.StatusCode != 200 {
		t.Fatalf("GET /api/auto: %d", resp.StatusCode)
	}
	if view.Paused == nil || view.Paused.By != "carol" || view.Paused.Reason != "carol holds" ||
		len(view.Schedules) != 1 || view.Schedules[0].Change != "level=yellow" || view.Schedules[0].State != master.SchedulePending {
		t.Fatalf("/api/auto after a manual change and a schedule = %+v", view)
	}
	until := view.Paused.Until

	bctx := testenv.Browser(t, 60*time.Second)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(ts.URL+"/console"),
		chromedp.SendKeys(chromedp.ID("token"), readerToken),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("auto-mode").textContent === "dry-run" && document.getElementById("auto-schedules").textContent.includes("s1")`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatal(err)
	}
	text := func(id string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if p := text("auto-proposal"); !strings.Contains(p, "auto-flex would set blue: cq: compress queue p99 1.8 s") {
		t.Errorf("proposal shown: %q", p)
	}
	if p := text("auto-pause"); !strings.Contains(p, "paused until "+until+" by carol") || !strings.Contains(p, "carol holds") {
		t.Errorf("pause shown: %q, want until %s by carol", p, until)
	}
	if p := text("auto-schedules"); !strings.Contains(p, "s1") || !strings.Contains(p, at.Format(time.RFC3339)) ||
		!strings.Contains(p, "level=yellow") || !strings.Contains(p, "peak at eight") || !strings.Contains(p, "1h0m0s") {
		t.Errorf("schedules shown: %q", p)
	}
	if p := text("auto-rules"); !strings.Contains(p, "compress_queue_p99_ms") || !strings.Contains(p, "1800") {
		t.Errorf("rules shown: %q", p)
	}
}
