package cluster_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"willow/client"
	"willow/internal/testenv"
)

// TestBrowserShowsEveryVariant uploads a photo at the normal flex level
// (variants stored as HEIC) and opens a page in headless Chromium, with its
// default Accept, whose <img> elements load every variant and the raw from
// both regions' edges. Every image must decode (naturalWidth > 0): the
// edge answers Chromium with the JPEG fallback. A control <img> forcing
// ?format=heic shows that Chromium cannot display the stored bytes.
func TestBrowserShowsEveryVariant(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	up := newClient(t, c, "a")
	res, err := up.UploadFile(ctx, filepath.Join(photosDir, "Bridge_by_Sander_Klootwijk.jpg"), client.UploadOptions{User: "browser", Business: "moments"})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	keys := urlKeys(t, c)
	exp := time.Now().Add(time.Hour)
	variants := []string{"thumb", "medium", "large", "raw"}
	var imgs, ids []string
	for _, region := range []string{"a", "b"} {
		edge := c.File.Regions[region].EdgecacheHTTP
		for _, v := range variants {
			u := "http://" + edge + keys.URL(res.ID, v, "browser", exp)
			_, ctype := waitHTTP(t, u) // the variants exist (Go's client sends no Accept: the stored bytes)
			if v != "raw" && ctype != "image/heic" {
				t.Fatalf("%s is stored as %s, want image/heic (the normal level)", v, ctype)
			}
			id := region + "-" + v
			ids = append(ids, id)
			imgs = append(imgs, fmt.Sprintf(`<img id="%s" src="%s">`, id, html.EscapeString(u)))
		}
	}
	control := "http://" + c.File.Regions["a"].EdgecacheHTTP + keys.URL(res.ID, "medium", "browser", exp) + "&format=heic"
	page := "<!doctype html><title>variants</title>" + strings.Join(imgs, "\n") + `<img id="control" src="` + html.EscapeString(control) + `">`
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page))
	}))
	defer ts.Close()

	bctx := testenv.Browser(t, 60*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate(ts.URL)); err != nil {
		t.Fatalf("open page: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`Array.from(document.images).every(i => i.complete)`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("images did not finish loading: %v", err)
	}
	for _, id := range ids {
		w, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.getElementById("`+id+`").naturalWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if w <= 0 {
			t.Errorf("Chromium shows %s with naturalWidth %d: not displayable", id, w)
		} else {
			t.Logf("%s: naturalWidth %d", id, w)
		}
	}
	w, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.getElementById("control").naturalWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if w != 0 {
		t.Errorf("control: Chromium displayed the HEIC bytes (naturalWidth %d); the test would not notice a missing fallback", w)
	}
}
