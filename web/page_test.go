package web_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"willow/internal/testenv"
	"willow/master"
)

// TestConsoleVendorsPinnedTusJS: the console serves the browser build of
// the pinned tus-js-client, byte for byte.
func TestConsoleVendorsPinnedTusJS(t *testing.T) {
	nodeBin(t)
	b, err := os.ReadFile("node_modules/tus-js-client/dist/tus.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, master.TusJS) {
		t.Fatal("master/static/tus.min.js is not web/node_modules/tus-js-client/dist/tus.min.js: copy it again after changing the pin")
	}
}

// pageState is window.willowState of the upload page.
type pageState struct {
	ResumedFrom   int64  `json:"resumedFrom"`
	FirstProgress int64  `json:"firstProgress"`
	MediaID       string `json:"mediaId"`
	Shown         bool   `json:"shown"`
	Error         string `json:"error"`
}

// TestConsoleUploadPageResumesAfterReload drives the console's upload page
// in headless Chromium: pick a file, upload in 64 KiB chunks, pause after
// the first one, reload the page, pick the same file again: the upload
// resumes at the front's offset (tus-js-client found it in localStorage)
// and the page shows the photo from the edge cache.
func TestConsoleUploadPageResumesAfterReload(t *testing.T) {
	c := live(t)
	path, raw := photo(t, "Kleiber_by_Lukas_Baubkus.jpg")
	page := strings.TrimSuffix(c.File.Console, "/console") + "/console/upload?chunk=65536&region=a"
	// avatar downloads are public: the page shows the photo by its plain
	// edge URL.
	tok := sign(t, c, "pageuser", "avatar")

	bctx := testenv.Browser(t, 3*time.Minute)

	ready := chromedp.Poll[bool](`document.getElementById("region").options.length > 0`, chromedp.WithPollingTimeout(20*time.Second))
	if err := chromedp.Do(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	if _, err := chromedp.Run(bctx, ready); err != nil {
		t.Fatalf("the page lists no upload front: %v", err)
	}
	if err := chromedp.Do(bctx,
		chromedp.SetValue(chromedp.ID("token"), tok),
		chromedp.SetUploadFiles(chromedp.ID("file"), []string{path}),
		chromedp.Click(chromedp.ID("start")),
	); err != nil {
		t.Fatal(err)
	}
	// Pause as soon as the first chunk is acknowledged.
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](
		`window.willowState.error === "" && window.willowState.offset > 0 && (document.getElementById("pause").click(), true)`,
		chromedp.WithPollingInterval(time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		st, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(window.willowState)`))
		t.Fatalf("no chunk acknowledged: %v (%s)", err, st)
	}
	paused, err := chromedp.Run(bctx, chromedp.Evaluate[int64](`window.willowState.offset`))
	if err != nil {
		t.Fatal(err)
	}
	if paused >= int64(len(raw)) {
		t.Fatalf("paused at %d of %d bytes: the upload finished before the pause", paused, len(raw))
	}
	time.Sleep(300 * time.Millisecond)

	// Reload and pick the same file: it resumes.
	if err := chromedp.Do(bctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, ready); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx,
		chromedp.SetUploadFiles(chromedp.ID("file"), []string{path}),
		chromedp.Click(chromedp.ID("start")),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.willowState.shown || window.willowState.error !== ""`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(150*time.Second))); err != nil {
		st, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(window.willowState)`))
		t.Fatalf("the photo never showed: %v (%s)", err, st)
	}
	st, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](`window.willowState`))
	if err != nil {
		t.Fatal(err)
	}
	if st.Error != "" || !st.Shown || st.MediaID == "" {
		t.Fatalf("page state %+v", st)
	}
	if st.ResumedFrom != 0 || st.FirstProgress < paused {
		t.Errorf("after the reload the upload did not resume (found previous: %v, first progress at %d, paused at %d)", st.ResumedFrom == 0, st.FirstProgress, paused)
	}
	w, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.getElementById("photo").naturalWidth`))
	if err != nil || w <= 0 {
		t.Fatalf("the photo is not displayed (naturalWidth %d, %v)", w, err)
	}
	t.Logf("paused at %d bytes, resumed, media %s shown %d px wide", paused, st.MediaID, w)
}
