package edgecache_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"willow/edgecache"
	"willow/media"
	"willow/node"
	fsstore "willow/store/fs"
)

// The child edge of TestFillMemoryBound: its settings.
const (
	childSlice    = 1 << 20
	childCapacity = 16 << 20
	childBudget   = 16 << 20
)

// TestEdgeChild is the edge process TestFillMemoryBound starts (this test
// binary again, with WILLOW_EDGE_CHILD set to a store directory). It prints
// its addresses and serves until its stdin closes.
func TestEdgeChild(t *testing.T) {
	dir := os.Getenv("WILLOW_EDGE_CHILD")
	if dir == "" {
		t.Skip("the child process of TestFillMemoryBound")
	}
	st, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{ID: "edge-a-1", Role: "edgecache", Region: "a", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := edgecache.New(edgecache.Config{SliceBytes: childSlice, CapacityBytes: childCapacity, FillBudgetBytes: childBudget},
		edgecache.Deps{Node: n, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	go n.Run(ctx)
	fmt.Printf("EDGE http=%s admin=%s\n", s.HTTPAddr(), n.AdminAddr())
	s.Run(ctx)
}

// vmKB reads a field (VmHWM: peak RSS, VmRSS) of /proc/PID/status in KiB.
func vmKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// metricValue scrapes one unlabelled metric from an admin /metrics page.
func metricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, body := get(t, "http://"+admin+"/metrics", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestFillMemoryBound runs an edge in a child process and checks its peak
// RSS while it serves cold, concurrent, whole downloads of large objects
// (fills go slice by slice under the fill budget), and the time to first
// byte of a cold 1 KiB Range on a large object (one slice, not the whole).
func TestFillMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400 MB")
	}
	const (
		objects = 8
		objSize = 40 << 20
		bigSize = 120 << 20 // the 120 MB video
	)
	dir := t.TempDir()
	st, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []media.ID
	for i := range objects {
		ids = append(ids, put(t, st, media.LocStore, i, media.VariantRaw, "video/mp4", payload(objSize, byte(i))))
	}
	big := put(t, st, media.LocStore, 99, media.VariantRaw, "video/mp4", payload(bigSize, 99))

	cmd := exec.Command(os.Args[0], "-test.run=^TestEdgeChild$")
	cmd.Env = append(os.Environ(), "WILLOW_EDGE_CHILD="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	var httpAddr, admin string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "EDGE http=%s admin=%s", &httpAddr, &admin); err == nil {
			break
		}
	}
	if httpAddr == "" {
		t.Fatal("child edge did not start")
	}
	go io.Copy(io.Discard, stdout)
	pid := cmd.Process.Pid
	base := "http://" + httpAddr

	// Time to first byte of a cold Range on the 120 MB object.
	start := time.Now()
	resp, err := http.DefaultClient.Do(mustReq(t, base+path(big, media.VariantRaw), "bytes=0-1023"))
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, one); err != nil || resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("cold range: status %d, %v", resp.StatusCode, err)
	}
	ttfb := time.Since(start)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	originAfterRange := metricValue(t, admin, "willow_edgecache_origin_bytes_total")
	if originAfterRange > childSlice {
		t.Fatalf("a cold 1 KiB range read %.0f bytes from origin, want at most one slice (%d)", originAfterRange, childSlice)
	}
	rssBefore := vmKB(t, pid, "VmHWM")

	// Concurrent cold whole downloads.
	start = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + path(id, media.VariantRaw))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil || n != objSize || resp.StatusCode != 200 {
				errs <- fmt.Errorf("object %d: status %d, %d bytes, %v", i, resp.StatusCode, n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	peak := vmKB(t, pid, "VmHWM")
	growth := (peak - rssBefore) / 1024
	total := objects * objSize >> 20
	t.Logf("cold 1 KiB range on %d MiB: first byte after %v, %.0f bytes from origin", bigSize>>20, ttfb, originAfterRange)
	t.Logf("%d concurrent cold downloads of %d MiB (%d MiB) in %v: peak RSS %d MiB -> %d MiB (+%d MiB); slice %d MiB, memory cache %d MiB, fill budget %d MiB",
		objects, objSize>>20, total, took.Round(time.Millisecond), rssBefore/1024, peak/1024, growth, childSlice>>20, childCapacity>>20, childBudget>>20)
	// Whole-object fills would hold 320 MiB. Live bytes are the cache, the
	// budget and a slice or two per stream (~48 MiB), which Go's GC
	// (GOGC=100) lets grow to about twice that; the bound is half the
	// whole objects, with room for a GC slowed by a loaded machine.
	if growth > int64(total)/2 {
		t.Fatalf("peak RSS grew by %d MiB during %d MiB of cold fills, want <= %d", growth, total, total/2)
	}
	if ttfb > 2*time.Second {
		t.Fatalf("first byte of a cold range after %v", ttfb)
	}
}

func mustReq(t *testing.T, url, rng string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", rng)
	return req
}
