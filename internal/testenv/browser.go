package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser starts headless Chromium (found as LookPath does, so a missing
// browser fails the test naming scripts/setup.sh) with a fresh profile and
// returns a chromedp context that ends after timeout or with the test.
// Chromium's own temporary files (its singleton socket's directory, which
// it leaves behind) go to a directory removed when the test ends; its
// path is short, since a Unix socket's is bounded.
func Browser(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	chromium := LookPath(t, "chromium")
	tmp, err := os.MkdirTemp("", "willow-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+tmp),
	)
	bctx, bcancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() {
		tcancel()
		bcancel()
		acancel()
		if err := os.RemoveAll(tmp); err != nil {
			t.Errorf("chromium's temporary directory: %v", err)
		}
	})
	return ctx
}
