package upload_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"willow/store/fs"
	"willow/upload"
)

// BenchmarkTusVsTusd uploads the same files with one stock tus client
// (tus-js-client under Node, web/tus/bench.mjs) to tusd (pinned in
// scripts/setup.sh, its file store) and to Willow's front (tus endpoint,
// fs store, fake instant compress) on the same disk, alternating server
// order every round: 1, 5 and 50 MiB, one client and 16 concurrent.
// Willow runs with its guarantees on: the declared SHA-256 is verified at
// commit and the upload is acknowledged only after the raw is fsynced in
// the store with its record and journal entry; tusd's file store does
// neither (no checksum unless the client sends one per request, no fsync).
// WILLOW_BENCH_ROUNDS sets the rounds (default 3; medians are reported);
// WILLOW_BENCH_DIR puts both stores there (default the test's temp dir);
// WILLOW_BENCH_ONLY=willow|tusd runs one server alone (for profiles);
// WILLOW_BENCH_SIZES=1,5 picks the file sizes in MiB (default 1,5,50), so
// a table can be measured in several shorter runs.
func BenchmarkTusVsTusd(b *testing.B) {
	tusd, err := exec.LookPath(filepath.Join(os.Getenv("HOME"), "go", "bin", "tusd"))
	if err != nil {
		if tusd, err = exec.LookPath("tusd"); err != nil {
			b.Fatal("tusd not found: run scripts/setup.sh (make setup)")
		}
	}
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("node not found: run scripts/setup.sh (make setup)")
	}
	if _, err := os.Stat("../web/node_modules/tus-js-client/package.json"); err != nil {
		b.Fatal("web/node_modules/tus-js-client missing: run scripts/setup.sh (make setup)")
	}
	dir := os.Getenv("WILLOW_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else if dir, err = os.MkdirTemp(dir, "willow-tusbench-"); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Willow's front.
	st, err := fs.New(filepath.Join(dir, "willow-store"))
	if err != nil {
		b.Fatal(err)
	}
	f := newFrontB(b, frontOpts{store: st, staging: filepath.Join(dir, "willow-staging"), instant: true})
	h, err := upload.NewHTTP(f.srv, upload.HTTPConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Run(ctx) }()

	// tusd with its file store.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	td := exec.Command(tusd, "-host", "127.0.0.1", "-port", port, "-upload-dir", filepath.Join(dir, "tusd"),
		"-base-path", "/files/", "-show-greeting=false", "-verbose=false")
	if err := td.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = td.Process.Kill(); _ = td.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("tusd did not listen")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The files: a photo head (1, 5 MiB) or a video head (50 MiB, over the
	// photo limit) and random bytes.
	type file struct {
		Path     string `json:"path"`
		Filetype string `json:"filetype"`
		SHA256   string `json:"sha256"`
	}
	var files []file
	sizes := []int{1 << 20, 5 << 20, 50 << 20}
	if v := os.Getenv("WILLOW_BENCH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			mib, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || mib <= 0 {
				b.Fatalf("WILLOW_BENCH_SIZES=%q: want MiB counts like 1,5,50", v)
			}
			sizes = append(sizes, mib<<20)
		}
	}
	for _, size := range sizes {
		src, ft := "../../shared/testdata/photos/Wine_by_Jakkub_Mede.jpg", "image/jpeg"
		if size > 30<<20 {
			src, ft = "../../shared/testdata/videos/cube.mpeg", "video/mpeg"
		}
		head, err := os.ReadFile(src)
		if err != nil {
			b.Fatal(err)
		}
		data := make([]byte, size)
		rand.Read(data)
		copy(data, head[:min(len(head), 64<<10)])
		p := filepath.Join(dir, fmt.Sprintf("file-%dMiB", size>>20))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, file{p, ft, sum(data)})
	}
	var tokens []string
	for w := range 16 {
		tokens = append(tokens, tok(b, fmt.Sprintf("tus-%d", w), "moments"))
	}
	type server struct {
		Name     string   `json:"name"`
		Endpoint string   `json:"endpoint"`
		Tokens   []string `json:"tokens,omitempty"`
		Willow   bool     `json:"willow,omitempty"`
	}
	servers := []server{
		{"tusd", "http://127.0.0.1:" + port + "/files/", nil, false},
		{"willow", "http://" + h.Addr() + upload.DefaultHTTPBasePath, tokens, true},
	}
	only := os.Getenv("WILLOW_BENCH_ONLY")
	type run struct {
		Server      int    `json:"server"`
		File        int    `json:"file"`
		Concurrency int    `json:"concurrency"`
		Uploads     int    `json:"uploads"`
		Tag         string `json:"tag"`
	}
	// Uploads per worker: about 10 MiB a run for one client, 16 uploads
	// for 16 clients.
	perWorker := func(size, c int) int {
		if c > 1 {
			return 1
		}
		return max(1, (10<<20)/size)
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("WILLOW_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	var runs []run
	for r := 0; r < rounds; r++ {
		for fi, size := range sizes {
			for _, c := range []int{1, 16} {
				for k := range servers {
					si := (k + r) % len(servers)
					if only != "" && servers[si].Name != only {
						continue
					}
					runs = append(runs, run{si, fi, c, perWorker(size, c), fmt.Sprintf("%dMiB/c%d", size>>20, c)})
				}
			}
		}
	}
	plan, err := json.Marshal(map[string]any{"servers": servers, "files": files, "runs": runs})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cmd := exec.CommandContext(ctx, nodeBin, "../web/tus/bench.mjs", string(plan))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	b.StopTimer()
	type result struct {
		Tag     string  `json:"tag"`
		Server  string  `json:"server"`
		Uploads int     `json:"uploads"`
		Bytes   float64 `json:"bytes"`
		Seconds float64 `json:"seconds"`
		Error   string  `json:"error"`
	}
	mbps := map[string]map[string][]float64{}
	ups := map[string]map[string][]float64{}
	var tags []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var res result
		if jerr := json.Unmarshal(sc.Bytes(), &res); jerr != nil {
			b.Fatalf("bench.mjs printed %q: %v", sc.Text(), jerr)
		}
		if res.Error != "" {
			b.Fatalf("upload failed: %s", res.Error)
		}
		if mbps[res.Tag] == nil {
			mbps[res.Tag], ups[res.Tag] = map[string][]float64{}, map[string][]float64{}
			tags = append(tags, res.Tag)
		}
		mbps[res.Tag][res.Server] = append(mbps[res.Tag][res.Server], res.Bytes/1e6/res.Seconds)
		ups[res.Tag][res.Server] = append(ups[res.Tag][res.Server], float64(res.Uploads)/res.Seconds)
	}
	if err != nil {
		b.Fatalf("bench.mjs: %v (stderr: %s)", err, stderr.String())
	}
	for _, tag := range tags {
		b.Run(tag, func(b *testing.B) {
			if only != "" {
				b.ReportMetric(median(mbps[tag][only]), only+"-MB/s")
				b.ReportMetric(median(ups[tag][only]), only+"-uploads/s")
				b.ReportMetric(0, "ns/op")
				return
			}
			w, t := median(mbps[tag]["willow"]), median(mbps[tag]["tusd"])
			b.ReportMetric(t, "tusd-MB/s")
			b.ReportMetric(w, "willow-MB/s")
			b.ReportMetric(median(ups[tag]["tusd"]), "tusd-uploads/s")
			b.ReportMetric(median(ups[tag]["willow"]), "willow-uploads/s")
			b.ReportMetric(100*w/t, "willow-%of-tusd")
			b.ReportMetric(0, "ns/op")
		})
	}
}
