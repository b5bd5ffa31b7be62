package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"willow/client"
	"willow/loadgen"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/token"
)

// The suite takes about five minutes on a 2-core box, so `go test ./...`
// runs it only with WILLOW_FAULTS=1; `make test-faults` sets it.
func gate(t *testing.T) {
	if os.Getenv("WILLOW_FAULTS") != "1" {
		t.Skip("fault suite: set WILLOW_FAULTS=1 (make test-faults); it takes about five minutes")
	}
}

const (
	ejectWithin   = 3 * time.Second
	recoverWithin = 60 * time.Second
	minSuccess    = 0.99
	// settle is how long after a shared dependency (Redis, S3) is back its
	// outage still counts as "no region healthy" (clients' cached routes,
	// nodes' reconnects).
	settle = 5 * time.Second
	// inFlight is how long before a shared dependency dies its outage
	// counts too: a request started then may still be running when it
	// does (a download's edge reading the origin, its retry in the other
	// region meeting the same outage), and the report files it under the
	// second it started in.
	inFlight = 2 * time.Second
)

// faultStep kills one process under load and restarts it.
type faultStep struct {
	name string
	proc string // DIR/run/NAME.pid to kill -9 and restart
	node string // node ID that must leave and come back ("" for masters, redis, s3)
	// shared marks a dependency of every region: while it is down (and
	// settle after), no region is healthy and requests are not counted.
	shared bool
	killAt time.Duration // into the load
	down   time.Duration // dead this long before the restart
	load   time.Duration // load duration
	// before, when set, runs just before the kill (waits for the victim
	// to be busy) and returns a note for the log.
	before func(t *testing.T, c *localCluster) string
}

func profile(d time.Duration, uploadRate, downloadRate float64) *loadgen.Profile {
	return &loadgen.Profile{
		Name:     "faults",
		PhotoDir: filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata", "photos"),
		Phases: []loadgen.Phase{{
			Name: "steady", Duration: loadgen.Duration(d), UploadRate: uploadRate, DownloadRate: downloadRate,
			Businesses: map[string]float64{"moments": 1}, Users: 50, ZipfAlpha: 0.8, MaxPhotoBytes: 1_000_000,
		}},
	}
}

func mustWd() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}

// isExcluded says second sec of a run overlaps one of the windows.
func isExcluded(sec int, windows [][2]time.Duration) bool {
	at := time.Duration(sec) * time.Second
	for _, w := range windows {
		if at+time.Second > w[0] && at < w[1] {
			return true
		}
	}
	return false
}

// counted sums the requests made in seconds outside the excluded
// windows: ok is succeeded uploads and downloads; bad is failed plus
// rejected ones. Downloads answered NotFound (variant not ready yet) and
// arrivals the generator dropped itself are in neither.
func counted(rep *loadgen.Report, excluded [][2]time.Duration) (ok, bad int) {
	for _, s := range rep.Seconds {
		if isExcluded(s.T, excluded) {
			continue
		}
		ok += s.Upload.Succeeded + s.Download.Succeeded
		bad += s.Upload.Failed + s.Upload.Rejected + s.Download.Failed + s.Download.Rejected
	}
	return ok, bad
}

// runLoad runs the load generator for d in the background.
func runLoad(c *localCluster, d time.Duration, up, down float64) (start time.Time, done <-chan *loadgen.Report, errc <-chan error) {
	ch := make(chan *loadgen.Report, 1)
	ec := make(chan error, 1)
	start = time.Now()
	go func() {
		rep, err := loadgen.Run(context.Background(), loadgen.RunConfig{Profile: profile(d, up, down), Target: c.target(),
			Mode: "faults", Seed: uint64(start.UnixNano())})
		ec <- err
		ch <- rep
	}()
	return start, ch, ec
}

func waitBusy(id string) func(t *testing.T, c *localCluster) string {
	return func(t *testing.T, c *localCluster) string {
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			if ns, err := c.nodes(); err == nil {
				if n := ns[id]; n != nil && (n.GetLoad().GetInFlight() > 0 || n.GetLoad().GetQueueMs() > 0) {
					return fmt.Sprintf("%s busy at the kill (in_flight %d, queue %.0f ms in its last heartbeat)",
						id, n.GetLoad().GetInFlight(), n.GetLoad().GetQueueMs())
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return id + " not seen busy within 8 s; killed anyway"
	}
}

func TestFaults(t *testing.T) {
	gate(t)
	c := startCluster(t)
	suiteStart := time.Now()

	steps := []faultStep{
		{name: "upload front", proc: "upload-a-1", node: "upload-a-1", killAt: 4 * time.Second, down: 3 * time.Second, load: 25 * time.Second},
		{name: "compress worker", proc: "compress-a-1", node: "compress-a-1", killAt: 4 * time.Second, down: 3 * time.Second,
			load: 25 * time.Second, before: waitBusy("compress-a-1")},
		{name: "edge cache", proc: "edgecache-a-1", node: "edgecache-a-1", killAt: 4 * time.Second, down: 3 * time.Second, load: 25 * time.Second},
		{name: "master", proc: "master-1", killAt: 4 * time.Second, down: 5 * time.Second, load: 20 * time.Second},
		{name: "redis 10s", proc: "redis", shared: true, killAt: 4 * time.Second, down: 10 * time.Second, load: 30 * time.Second},
		{name: "s3 20s", proc: "s3", shared: true, killAt: 4 * time.Second, down: 20 * time.Second, load: 40 * time.Second},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) { runStep(t, c, st) })
	}
	t.Run("upload front mid-stream", func(t *testing.T) { midStream(t, c) })
	t.Run("retries off", func(t *testing.T) { retriesOff(t, c) })
	t.Run("probe uploads intact", func(t *testing.T) {
		c.t = t
		lost := 0
		for _, p := range c.probeIDs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			h := sha256.New()
			_, err := c.client.Download(ctx, p.id, "raw", h)
			cancel()
			if err != nil || hex.EncodeToString(h.Sum(nil)) != p.sha {
				lost++
				t.Errorf("probe upload %s: %v (sha256 match %v)", p.id, err, err == nil && hex.EncodeToString(h.Sum(nil)) == p.sha)
			}
		}
		t.Logf("%d probe uploads, %d not downloadable intact at the end", len(c.probeIDs), lost)
	})
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Errorf("not every node healthy %v after the suite", d)
	}
	t.Logf("fault suite ran %v (plus start-up)", time.Since(suiteStart).Round(time.Second))
}

func runStep(t *testing.T, c *localCluster, st faultStep) {
	c.t = t
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Fatalf("cluster not healthy before the step (%v)", d)
	}
	start, done, errc := runLoad(c, st.load, 1, 3)
	stopProbe := startProber(t, c)
	time.Sleep(st.killAt)
	if st.before != nil {
		t.Log(st.before(t, c))
	}
	killT := c.kill(st.proc)
	if st.node != "" {
		state := stateOf(st.node)
		d, ok := c.waitFor(ejectWithin+2*time.Second, func(ns map[string]*willowv1.NodeStatus) bool {
			return state(ns) != "healthy"
		})
		since := time.Since(killT)
		if !ok || since > ejectWithin {
			t.Errorf("%s left healthy %v after kill -9 (polled %v), want within %v", st.node, since.Round(10*time.Millisecond), d, ejectWithin)
		} else {
			t.Logf("%s ejected %v after kill -9", st.node, since.Round(10*time.Millisecond))
		}
	} else if st.proc == "master-1" {
		// The other master answers; nodes fail over to it and stay healthy.
		time.Sleep(3 * time.Second)
		ns, err := c.nodes()
		if err != nil {
			t.Errorf("ListNodes with master-1 dead: %v", err)
		} else {
			for id, n := range ns {
				if n.GetState() != "healthy" {
					t.Errorf("with master-1 dead, %s is %s (%s)", id, n.GetState(), n.GetReason())
				}
			}
		}
	}
	time.Sleep(time.Until(killT.Add(st.down)))
	c.restart(st.proc)
	restartT := time.Now()
	if st.node != "" {
		state := stateOf(st.node)
		if d, ok := c.waitFor(recoverWithin, func(ns map[string]*willowv1.NodeStatus) bool { return state(ns) == "healthy" }); !ok {
			t.Errorf("%s not healthy %v after its restart", st.node, d)
		} else {
			t.Logf("%s healthy again %v after its restart", st.node, d.Round(10*time.Millisecond))
		}
	}
	if st.proc == "master-1" {
		if d, err := c.masterAnswers(st.proc, recoverWithin); err != nil {
			t.Errorf("restarted master-1 does not answer ListNodes with every node after %v: %v", d, err)
		} else {
			t.Logf("restarted master-1 answers ListNodes with every node %v after its restart", d.Round(10*time.Millisecond))
		}
	}
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Errorf("cluster not all healthy %v after the restart of %s", d, st.proc)
	} else {
		t.Logf("all nodes healthy %v after the restart", d.Round(10*time.Millisecond))
	}
	if err := <-errc; err != nil {
		t.Errorf("load run: %v", err)
	}
	rep := <-done
	probes := stopProbe()
	var excl [][2]time.Duration
	if st.shared {
		excl = append(excl, [2]time.Duration{killT.Sub(start) - inFlight, restartT.Sub(start) + settle})
	}
	ok, bad := counted(rep, excl)
	allOK, allBad := counted(rep, nil)
	pOK, pBad := countProbes(probes, start, excl)
	pAllOK, pAllBad := countProbes(probes, start, nil)
	t.Logf("probe (raw downloads, uploads every 3 s): %d/%d counted (%.2f%%), %d/%d overall",
		pOK, pOK+pBad, pct(pOK, pBad), pAllOK, pAllOK+pAllBad)
	t.Logf("load generator: %d/%d counted (%.2f%%), %d/%d overall", ok, ok+bad, pct(ok, bad), allOK, allOK+allBad)
	ok, bad = ok+pOK, bad+pBad
	tot := rep.Totals
	t.Logf("load %v: uploads ok %d failed %d rejected %d; downloads ok %d failed %d rejected %d not-ready %d; lost %d pending %d",
		st.load, tot.Upload.Succeeded, tot.Upload.Failed, tot.Upload.Rejected, tot.Download.Succeeded, tot.Download.Failed,
		tot.Download.Rejected, tot.Download.NotReady, tot.Lost, tot.Pending)
	if tot.Lost != 0 {
		t.Errorf("%d acknowledged uploads lost (not downloadable with their SHA-256)", tot.Lost)
	}
	if tot.Upload.Succeeded == 0 {
		t.Errorf("no upload succeeded during the step")
	}
	if ok+bad > 0 && float64(ok)/float64(ok+bad) < minSuccess {
		t.Errorf("client success %.2f%% (%d of %d counted requests), want >= %.0f%% with retries on",
			pct(ok, bad), ok, ok+bad, minSuccess*100)
	}
	for r, n := range tot.Rejections {
		t.Logf("  rejection %s: %d", r, n)
	}
	for _, s := range rep.Seconds {
		if len(s.Errors) > 0 && !isExcluded(s.T, excl) {
			t.Logf("  load generator at %ds (counted): %s", s.T, strings.Join(s.Errors, "; "))
		}
	}
}

// The prober runs beside the load generator with the same router: an
// upload every 3 s (photos in turn) and a download of the raw original
// of a random earlier probe upload every 500 ms. The generator downloads
// thumb and medium variants, which on a 2-core box mostly wait behind the
// compress backlog (NotFound, not counted); the raw downloads exercise
// the edge caches, pools and store during every fault. Its requests are
// counted like the generator's, and every failure is logged with its
// exact status, which the generator's report does not keep.
type probeRec struct {
	at  time.Time
	ok  bool
	err string
}

type probed struct {
	id, sha string
}

func startProber(t *testing.T, c *localCluster) (stop func() []probeRec) {
	photos, err := filepath.Glob(filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata", "photos", "*.jpg"))
	if err != nil || len(photos) == 0 {
		t.Fatalf("no photos: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var recs []probeRec
	add := func(at time.Time, kind string, err error) {
		mu.Lock()
		defer mu.Unlock()
		r := probeRec{at: at, ok: err == nil}
		if err != nil && ctx.Err() == nil {
			r.err = kind + ": " + rpcstatus.Line(err)
			t.Logf("probe %s failed after %v: %s", kind, time.Since(at).Round(time.Millisecond), rpcstatus.Line(err))
		}
		if ctx.Err() == nil {
			recs = append(recs, r)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			c.probeSeq++
			photo, err := os.ReadFile(photos[c.probeSeq%len(photos)])
			if err != nil {
				t.Error(err)
				return
			}
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			t0 := time.Now()
			res, err := c.client.Upload(cctx, bytes.NewReader(photo), int64(len(photo)), client.UploadOptions{
				UploadID: fmt.Sprintf("probe-%d-%d", t0.UnixNano(), i), User: "u-probe", Business: "moments", Filename: "p.jpg"})
			ccancel()
			add(t0, "upload", err)
			if err == nil {
				sum := sha256.Sum256(photo)
				mu.Lock()
				c.probeIDs = append(c.probeIDs, probed{res.ID, hex.EncodeToString(sum[:])})
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			mu.Lock()
			var p probed
			if n := len(c.probeIDs); n > 0 {
				p = c.probeIDs[(i*7919)%n]
			}
			mu.Unlock()
			if p.id != "" {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				h := sha256.New()
				_, err := c.client.Download(cctx, p.id, "raw", h)
				ccancel()
				if err == nil && hex.EncodeToString(h.Sum(nil)) != p.sha {
					err = fmt.Errorf("download %s: sha256 mismatch", p.id)
				}
				add(t0, "download", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() []probeRec {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return recs
	}
}

// countProbes counts probe requests outside the excluded windows
// (offsets from start).
func countProbes(recs []probeRec, start time.Time, excluded [][2]time.Duration) (ok, bad int) {
	for _, r := range recs {
		at := r.at.Sub(start)
		skip := false
		for _, w := range excluded {
			if at >= w[0] && at < w[1] {
				skip = true
			}
		}
		if skip {
			continue
		}
		if r.ok {
			ok++
		} else {
			bad++
		}
	}
	return ok, bad
}

func pct(ok, bad int) float64 {
	if ok+bad == 0 {
		return 100
	}
	return 100 * float64(ok) / float64(ok+bad)
}

// midStream opens an upload stream straight to upload-a-1, sends the
// first chunk, kills the front, then completes the same upload ID
// through the client (which routes to a live front) and checks the media
// downloads with the same SHA-256.
func midStream(t *testing.T, c *localCluster) {
	c.t = t
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Fatalf("cluster not healthy before the step (%v)", d)
	}
	photo, err := os.ReadFile(filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata", "photos", "Dragonfly_by_Bolly.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(photo) <= client.ChunkSize {
		t.Fatalf("need a photo over one chunk, have %d bytes", len(photo))
	}
	sum := sha256.Sum256(photo)
	shaHex := hex.EncodeToString(sum[:])
	var addr string
	for _, n := range c.file.Nodes {
		if n.Role == "upload" && n.Region == "a" && addr == "" {
			addr = n.Addr
		}
	}
	conn, err := c.router.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	uc := willowv1.NewUploadClient(conn)
	uploadID := fmt.Sprintf("midstream-%d", time.Now().UnixNano())
	tok, err := token.Sign(c.secret, "u-mid", "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(client.WithToken(context.Background(), tok), 30*time.Second)
	defer cancel()
	if _, err := uc.Begin(ctx, &willowv1.BeginRequest{UploadId: uploadID, Token: tok, Business: "moments", User: "u-mid",
		Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(photo)), Sha256: shaHex, Filename: "dragonfly.jpg"}); err != nil {
		t.Fatalf("Begin on upload-a-1 (%s): %v", addr, err)
	}
	stream, err := uc.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&willowv1.Chunk{UploadId: uploadID, Offset: 0, Data: photo[:client.ChunkSize]}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the chunk reaches the front
	killT := c.kill("upload-a-1")
	ejected := make(chan time.Duration, 1)
	go func() {
		_, ok := c.waitFor(ejectWithin+2*time.Second, func(ns map[string]*willowv1.NodeStatus) bool {
			return stateOf("upload-a-1")(ns) != "healthy"
		})
		if !ok {
			ejected <- -1
			return
		}
		ejected <- time.Since(killT)
	}()
	if _, err := stream.CloseAndRecv(); err == nil {
		t.Error("the stream to the killed front completed")
	}
	res, err := c.client.Upload(ctx, bytes.NewReader(photo), int64(len(photo)), client.UploadOptions{
		UploadID: uploadID, User: "u-mid", Business: "moments", Filename: "dragonfly.jpg"})
	if err != nil {
		t.Fatalf("resuming the upload through the client after the kill: %v", err)
	}
	t.Logf("upload %s completed on region %s %v after the kill", res.ID, res.Region, time.Since(killT).Round(10*time.Millisecond))
	if d := <-ejected; d < 0 || d > ejectWithin {
		t.Errorf("upload-a-1 left healthy %v after kill -9 (-1: not within %v), want within %v", d, ejectWithin+2*time.Second, ejectWithin)
	} else {
		t.Logf("upload-a-1 ejected %v after kill -9", d.Round(10*time.Millisecond))
	}
	c.restart("upload-a-1")
	h := sha256.New()
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	if _, err := c.client.Download(dctx, res.ID, "raw", h); err != nil {
		t.Fatalf("download %s: %v", res.ID, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != shaHex {
		t.Fatalf("download %s sha256 %s, want %s", res.ID, got, shaHex)
	}
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Errorf("upload-a-1 not back %v after its restart", d)
	}
}

// retriesOff sets retries=off, kills an upload front and an edge cache of
// region a under load, and checks failures show while nothing
// acknowledged is lost.
func retriesOff(t *testing.T, c *localCluster) {
	c.t = t
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Fatalf("cluster not healthy before the step (%v)", d)
	}
	c.setRetries("off")
	defer c.setRetries("on")
	time.Sleep(6 * time.Second) // clients learn knobs with Route (TTL 5 s)
	start, done, errc := runLoad(c, 25*time.Second, 2, 4)
	stopProbe := startProber(t, c)
	time.Sleep(4 * time.Second)
	killT := c.kill("upload-a-1")
	c.kill("edgecache-a-1")
	time.Sleep(time.Until(killT.Add(3 * time.Second)))
	c.restart("upload-a-1")
	c.restart("edgecache-a-1")
	if d, ok := c.waitAllHealthy(recoverWithin); !ok {
		t.Errorf("not all healthy %v after the restarts", d)
	}
	if err := <-errc; err != nil {
		t.Errorf("load run: %v", err)
	}
	rep := <-done
	probes := stopProbe()
	tot := rep.Totals
	ok, bad := counted(rep, nil)
	pOK, pBad := countProbes(probes, start, nil)
	t.Logf("retries=off probe: %d/%d ok", pOK, pOK+pBad)
	ok, bad = ok+pOK, bad+pBad
	t.Logf("retries=off: uploads ok %d failed %d rejected %d; downloads ok %d failed %d not-ready %d; lost %d; success %.2f%%",
		tot.Upload.Succeeded, tot.Upload.Failed, tot.Upload.Rejected, tot.Download.Succeeded, tot.Download.Failed,
		tot.Download.NotReady, tot.Lost, pct(ok, bad))
	if tot.Lost != 0 {
		t.Errorf("%d acknowledged uploads lost with retries off", tot.Lost)
	}
	if bad == 0 {
		t.Errorf("retries=off: no failure showed while a front and an edge cache of region a were killed")
	}
}
