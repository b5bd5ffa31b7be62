package master_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

type trendsDoc struct {
	StepMs  int64 `json:"step_ms"`
	SpanMs  int64 `json:"span_ms"`
	Regions []struct {
		Region string `json:"region"`
		Points []struct {
			AtMs            int64    `json:"at_unix_ms"`
			UploadRate      *float64 `json:"upload_rate"`
			UploadSuccess   *float64 `json:"upload_success"`
			UploadP99Ms     *float64 `json:"upload_p99_ms"`
			CompressQueueMs *float64 `json:"compress_queue_p99_ms"`
			Pool1Bytes      *float64 `json:"pool1_bytes"`
			Pool2Bytes      *float64 `json:"pool2_bytes"`
			HeldItems       *float64 `json:"held_items"`
			Level           string   `json:"level"`
		} `json:"points"`
		Markers []struct {
			From  string `json:"from"`
			To    string `json:"to"`
			Actor string `json:"actor"`
		} `json:"markers"`
	} `json:"regions"`
}

// beat registers nodes with the master and heartbeats them with fixed
// loads every 100 ms until the test ends.
func beat(t *testing.T, m *testMaster, loads map[*willowv1.NodeInfo]*willowv1.Load) {
	t.Helper()
	for info := range loads {
		if _, err := m.client.Register(ctxT(t), &willowv1.RegisterRequest{Node: info}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for info, l := range loads {
				m.client.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info, Load: l})
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// TestConsoleTrends feeds heartbeats to a master sampling every 500 ms
// (a 90 s span, so the level marker stays in it on a slow machine),
// switches the level, and reads the trends: without a token they are
// refused, with the read token they hold the figures per region and the
// level change; in headless Chromium the charts draw them.
func TestConsoleTrends(t *testing.T) {
	m := startMasterWith(t, testenv.StartRedis(t).Client(t), "master-1", master.Config{TrendStep: 500 * time.Millisecond})
	ts := httptest.NewServer(m.srv.ConsoleHandler())
	t.Cleanup(ts.Close)
	info := func(id, role, region string) *willowv1.NodeInfo {
		return &willowv1.NodeInfo{Id: id, Role: role, Region: region, Addr: "127.0.0.1:1"}
	}
	beat(t, m, map[*willowv1.NodeInfo]*willowv1.Load{
		// 10 requests a heartbeat, 1 of them failed.
		info("upload-a-1", "upload", "a"): {Requests: 10, Errors: 1, SuccessRate: 0.9, LatencyP99Ms: 2400,
			Gauges: map[string]float64{"pool1_bytes": 5 << 20, "pool2_bytes": 1 << 20}},
		info("compress-a-1", "compress", "a"): {QueueP99Ms: 350, SuccessRate: 1},
		info("timeline-a-1", "timeline", "a"): {SuccessRate: 1, Gauges: map[string]float64{"held_items": 42}},
		info("upload-b-1", "upload", "b"):     {Requests: 0, SuccessRate: 1},
		// A front that reports its finished uploads: 3/s succeeded, 1/s
		// failed; its 40 requests (chunks, status…) are not uploads.
		info("upload-c-1", "upload", "c"): {Requests: 40, SuccessRate: 1,
			Gauges: map[string]float64{node.GaugeUploadsPerS: 3, node.GaugeUploadFailuresPerS: 1}},
	})

	// The attacker's side: no token, a wrong one, a token in the URL.
	if resp := getJSON(t, ts.URL+"/api/trends", "", nil); resp.StatusCode != 401 {
		t.Fatalf("GET /api/trends without a token = %d, want 401", resp.StatusCode)
	}
	if resp := getJSON(t, ts.URL+"/api/trends", "guess", nil); resp.StatusCode != 401 {
		t.Fatalf("GET /api/trends with a wrong token = %d, want 401", resp.StatusCode)
	}
	if resp := getJSON(t, ts.URL+"/api/trends?token="+readerToken, "", nil); resp.StatusCode != 400 {
		t.Fatalf("GET /api/trends?token= = %d, want 400", resp.StatusCode)
	}

	if _, err := m.client.SetFlex(ctxT(t), &willowv1.SetFlexRequest{Token: token, Level: "red", Reason: "trend marker"}); err != nil {
		t.Fatal(err)
	}
	var doc trendsDoc
	deadline := time.Now().Add(30 * time.Second)
	for {
		doc = trendsDoc{}
		if resp := getJSON(t, ts.URL+"/api/trends", readerToken, &doc); resp.StatusCode != 200 {
			t.Fatalf("GET /api/trends = %d", resp.StatusCode)
		}
		if len(doc.Regions) == 3 && len(doc.Regions[0].Points) >= 5 && doc.Regions[0].Points[len(doc.Regions[0].Points)-1].Level == "red" &&
			doc.Regions[0].Points[len(doc.Regions[0].Points)-1].UploadP99Ms != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trends never filled: %+v", doc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if doc.StepMs != 500 || doc.SpanMs != 180*500 {
		t.Fatalf("step %d ms, span %d ms; want 500 and 90000", doc.StepMs, doc.SpanMs)
	}
	a, b := doc.Regions[0], doc.Regions[1]
	p := a.Points[len(a.Points)-1]
	if a.Region != "a" || p.UploadRate == nil || *p.UploadRate <= 0 || p.UploadSuccess == nil || *p.UploadSuccess < 0.89 || *p.UploadSuccess > 0.91 ||
		*p.UploadP99Ms != 2400 || p.CompressQueueMs == nil || *p.CompressQueueMs != 350 || p.Pool1Bytes == nil || *p.Pool1Bytes != 5<<20 ||
		*p.Pool2Bytes != 1<<20 || p.HeldItems == nil || *p.HeldItems != 42 {
		t.Fatalf("region a's last sample = %+v", p)
	}
	if len(a.Markers) != 1 || a.Markers[0].From != "normal" || a.Markers[0].To != "red" || a.Markers[0].Actor != "oncall" {
		t.Fatalf("region a's markers = %+v, want normal → red by oncall", a.Markers)
	}
	if c := doc.Regions[2].Points[len(doc.Regions[2].Points)-1]; doc.Regions[2].Region != "c" || c.UploadRate == nil || *c.UploadRate != 4 ||
		c.UploadSuccess == nil || *c.UploadSuccess != 0.75 {
		t.Fatalf("region c's last sample = %+v, want 4 uploads/s, 75%% of them ok", c)
	}
	// Region b has an idle upload front and nothing else: a rate of 0,
	// gaps (not zeros) for what nothing reported.
	q := b.Points[len(b.Points)-1]
	if b.Region != "b" || q.UploadRate == nil || *q.UploadRate != 0 || q.UploadSuccess != nil || q.UploadP99Ms != nil ||
		q.CompressQueueMs != nil || q.HeldItems != nil {
		t.Fatalf("region b's last sample = %+v, want rate 0 and gaps", q)
	}

	// The page draws the charts with the read token.
	ctx := testenv.Browser(t, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/console"),
		chromedp.SendKeys(chromedp.ID("token"), readerToken),
		chromedp.WaitVisible(chromedp.ID("trend-a-upload-rate")),
	); err != nil {
		t.Fatalf("open console: %v", err)
	}
	for _, id := range []string{"trend-a-upload-rate", "trend-a-upload-success", "trend-a-upload-p99", "trend-a-compress-queue", "trend-a-pools", "trend-a-held"} {
		// The page reloads the trends every 5 s and the master samples every
		// 500 ms, so the line grows: wait for it rather than read it once
		// (a few samples 500 ms apart on a 90 s axis are only a few pixels).
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const s = document.getElementById("`+id+`");
			const p = s.querySelector("path"); return +s.dataset.points >= 2 && p !== null && p.getTotalLength() > 10 && s.querySelectorAll("line.mk-red").length === 1; })()`,
			chromedp.WithPollingTimeout(20*time.Second)))
		if err != nil {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("`+id+`").outerHTML`))
			t.Fatalf("%s is not drawn with data and a red marker (%v): %s", id, err, html)
		}
	}
	now, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("trend-a-held-now")))
	if err != nil || now != "42" {
		t.Fatalf("held now = %q, %v", now, err)
	}
	// Region b's p99 chart is a gap: nothing drawn.
	if pts, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("trend-b-upload-p99").dataset.points`)); err != nil || pts != "0" {
		t.Fatalf("region b's p99 chart draws %s points (%v), want 0", pts, err)
	}
}
