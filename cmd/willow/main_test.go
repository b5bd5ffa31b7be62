package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"willow/cluster"
	"willow/flex"
	"willow/internal/testenv"
	"willow/limits"
)

// The one-box cluster the CLI tests share.
var (
	onceCluster sync.Once
	shared      *cluster.Cluster
	sharedDir   string
	sharedErr   error
)

func testCluster(t *testing.T) (*cluster.Cluster, string) {
	t.Helper()
	testenv.LookPath(t, "redis-server")
	onceCluster.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "willow-cli-")
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared, sharedErr = cluster.Start(ctx, cluster.Config{Dir: sharedDir, HeartbeatInterval: 200 * time.Millisecond})
	})
	if sharedErr != nil {
		t.Fatalf("cluster: %v", sharedErr)
	}
	return shared, filepath.Join(sharedDir, "cluster.json")
}

// cliAsMain makes the test binary run as the willow CLI, so a test can
// put a `willow` on a shell's PATH (TestUpBannerWorksAsPrinted).
const cliAsMain = "WILLOW_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliAsMain) == "1" {
		os.Unsetenv(cliAsMain)
		main()
	}
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// run runs the CLI in process.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code = m.Run(context.Background(), args)
	return out.String(), errb.String(), code
}

func TestUploadDownloadCLI(t *testing.T) {
	_, cf := testCluster(t)
	photo := "../../../shared/testdata/photos/mate_LadyBird.jpg"
	out, errs, code := run(t, "upload", "--cluster", cf, "--upload-id", "cli-1", "--user", "alice", photo)
	if code != 0 {
		t.Fatalf("upload exit %d: %s", code, errs)
	}
	var res struct {
		ID, SHA256, Region, Location string
		Bytes                        int64
		Variants                     []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("upload output %q: %v", out, err)
	}
	if res.ID == "" || res.Bytes == 0 || res.SHA256 == "" || res.Region == "" {
		t.Fatalf("upload output missing fields: %s", out)
	}
	again, _, code := run(t, "upload", "--cluster", cf, "--upload-id", "cli-1", "--user", "alice", photo)
	if code != 0 || !strings.Contains(again, res.ID) {
		t.Fatalf("same upload ID gave %s", again)
	}
	dst := filepath.Join(t.TempDir(), "raw.jpg")
	if _, errs, code := run(t, "download", "--cluster", cf, res.ID, "--variant", "raw", "-o", dst); code != 0 {
		t.Fatalf("download exit %d: %s", code, errs)
	}
	got, _ := os.ReadFile(dst)
	want, _ := os.ReadFile(photo)
	if !bytes.Equal(got, want) {
		t.Fatal("downloaded raw differs from the upload")
	}
}

func TestCLIErrors(t *testing.T) {
	_, cf := testCluster(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"no master", []string{"upload", "x.jpg"}, 2, "--master"},
		{"missing file", []string{"upload", "--cluster", cf, "/nonexistent.jpg"}, 1, "no such file"},
		{"bad media id", []string{"download", "--cluster", cf, "nope", "-o", "/dev/null"}, 1, "INVALID_ARGUMENT"},
		{"unknown media", []string{"download", "--cluster", cf, "s.a.upload-a-1.00000000000000000000000000000000", "-o", filepath.Join(t.TempDir(), "x")}, 1, "NOT_FOUND"},
		{"unknown business", []string{"upload", "--cluster", cf, "--business", "nope", "../../../shared/testdata/photos/mate_Wood.jpg"}, 1, flex.ReasonUnknownBusiness},
		{"pixel bomb", []string{"upload", "--cluster", cf, "../../../shared/testdata/bad/bomb.png"}, 1, limits.ReasonPixelBomb},
		{"forged token", []string{"upload", "--cluster", cf, "--upload-token", "forged", "../../../shared/testdata/photos/mate_Wood.jpg"}, 1, "UNAUTHENTICATED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, code := run(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.contains) {
				t.Fatalf("exit %d stderr %q, want %d containing %q", code, errs, tc.code, tc.contains)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") > 0 && tc.code == 1 {
				t.Errorf("error is not one line: %q", errs)
			}
		})
	}
}

func TestLoadRunEmbeddedWritesReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own cluster and runs a load profile")
	}
	testenv.LookPath(t, "redis-server")
	dir := t.TempDir()
	prof := filepath.Join(dir, "tiny.yaml")
	photos, _ := filepath.Abs("../../../shared/testdata/photos")
	os.WriteFile(prof, []byte(`name: tiny
photo_dir: `+photos+`
phases:
  - {name: warm, duration: 3s, upload_rate: 2, download_rate: 5, max_photo_bytes: 600000}
  - {name: peak, duration: 3s, upload_rate: 4, download_rate: 5, max_photo_bytes: 600000}
actions:
  - {at: 3s, level: blue, reason: test}
`), 0o644)
	report := filepath.Join(dir, "report")
	out, errs, code := run(t, "load", "run", prof, "--embedded", "--report", report)
	if code != 0 {
		t.Fatalf("load run exit %d: %s\n%s", code, errs, out)
	}
	for _, f := range []string{"report.json", "report.md", "uploads.svg", "downloads.svg", "latency.svg", "rejections.svg", "pools.svg"} {
		b, err := os.ReadFile(filepath.Join(report, f))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".svg") && (!strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "<polyline")) {
			t.Errorf("%s is not a chart with lines", f)
		}
	}
	var rep struct {
		Totals struct {
			Lost   int
			Upload struct{ Succeeded int }
		}
		Events []struct{ Level string }
	}
	b, _ := os.ReadFile(filepath.Join(report, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Upload.Succeeded == 0 || rep.Totals.Lost != 0 {
		t.Errorf("report totals %+v", rep.Totals)
	}
	if len(rep.Events) != 1 || rep.Events[0].Level != "blue" {
		t.Errorf("events %+v, want the blue switch", rep.Events)
	}
}
