package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/client"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/token"
	"willow/upload"
)

// The soak (make soak, WILLOW_SOAK=1) runs a deploy/local cluster for
// WILLOW_SOAK_DURATION (default 10m) under a low steady load with the
// pools forced on and off and drained, abandoned uploads, poison photos, a
// front and an edge killed and restarted; then it lets the cluster settle
// and asserts that disk use is back within bounds, RSS and goroutines of
// every process are flat over the last half, and nothing acknowledged was
// lost. docs/operations.md has the figures of a run.
const (
	// Tombstones of expired uploads live one more staging_ttl, so an
	// abandoned upload is checked upload_expired at its age
	// soakStagingTTL+soakGCInterval+10s, before its tombstone can go.
	soakStagingTTL = 90 * time.Second
	// The staging GC runs every minute (upload.DefaultGCInterval).
	soakGCInterval = time.Minute
	soakEdgeDisk   = 32 << 20
	soakEdgeMem    = 16 << 20
	soakSample     = 5 * time.Second
	// Bounds at the end.
	// Staging keeps no staged bytes at the end, only small files: the
	// commit markers of committed uploads (kept CommittedTTL, 1 h) and the
	// tombstones of expired ones; per front at most stagingBase plus
	// stagingPerUpload for every upload the soak acknowledged.
	stagingBase      = 1 << 20
	stagingPerUpload = 16 << 10
	poolBound        = 1 << 20 // per front, both pools: compacted back near empty
	// Flatness over the last half of the load, per process: the highest
	// RSS of its last quarter stays within max(rssGrowFrac of its median
	// over the last half, rssGrowAbs) of the highest of its first half, and
	// goroutines within max(gorGrowFrac, gorGrowAbs), both in the last
	// quarter and once settled idle (the median of the settle's last
	// minute). A leak of r bytes (or goroutines) a second shows as
	// r x duration/2 between the two high-water marks, as it would in a
	// least-squares trend over the last half; unlike that trend, a
	// process catching up with its own earlier high-water mark (a
	// restarted edge reopening its connections, a compress worker's Go
	// heap meeting a larger photo) does not read as growth. A process
	// killed and restarted is one series: its first half includes its
	// life before the kill.
	rssGrowFrac = 0.15
	rssGrowAbs  = 16 << 20
	gorGrowFrac = 0.10
	gorGrowAbs  = 10
)

func soakGate(t *testing.T) time.Duration {
	if os.Getenv("WILLOW_SOAK") != "1" {
		t.Skip("soak: set WILLOW_SOAK=1 (make soak); it takes about 15 minutes")
	}
	d := 10 * time.Minute
	if v := os.Getenv("WILLOW_SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < 2*time.Minute {
			t.Fatalf("WILLOW_SOAK_DURATION=%q: want a duration of at least 2m (%v)", v, err)
		}
	}
	return d
}

// proc is one Willow process of the cluster (redis and s3 are not).
type proc struct {
	name, role, region, addr, admin string
}

func (c *localCluster) procs() []proc {
	metas, _ := filepath.Glob(filepath.Join(c.dir, "run", "*.meta"))
	var out []proc
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			c.t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) != 3 || f[0] == "redis" || f[0] == "s3" {
			continue
		}
		host, _, _ := net.SplitHostPort(f[2])
		out = append(out, proc{name: strings.TrimSuffix(filepath.Base(m), ".meta"), role: f[0], region: f[1], addr: f[2],
			admin: net.JoinHostPort(host, strconv.Itoa(c.port+1))})
	}
	return out
}

// scrape reads a few metrics (unlabelled, or summed over labels) from a
// process's /metrics.
func scrape(admin string, names ...string) (map[string]float64, error) {
	hc := http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s/metrics: %s", admin, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
				f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
				if len(f) > 0 {
					if v, err := strconv.ParseFloat(f[0], 64); err == nil {
						out[n] += v
					}
				}
			}
		}
	}
	return out, sc.Err()
}

// du is the disk use (allocated blocks) of the files under dir.
func du(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

type sample struct {
	at       time.Duration // since the load started
	rss, gor float64
	// Go's own view: heap in use (live objects and their spans), what the
	// runtime holds from the OS (sys minus released heap), OS threads.
	heap, goHeld, threads float64
}

// sampled are the metrics the sampler reads of every process.
var sampled = []string{"process_resident_memory_bytes", "go_goroutines", "go_memstats_heap_inuse_bytes",
	"go_memstats_sys_bytes", "go_memstats_heap_released_bytes", "go_threads"}

// sampler scrapes RSS and goroutines of every process every soakSample.
type sampler struct {
	mu      sync.Mutex
	series  map[string][]sample
	errs    map[string]int
	stop    context.CancelFunc
	done    chan struct{}
	started time.Time
}

func startSampler(ps []proc, start time.Time) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{series: map[string][]sample{}, errs: map[string]int{}, stop: cancel, done: make(chan struct{}), started: start}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(soakSample)
		defer tick.Stop()
		for {
			for _, p := range ps {
				m, err := scrape(p.admin, sampled...)
				s.mu.Lock()
				if err != nil {
					s.errs[p.name]++ // down (killed) or slow; the gap shows
				} else {
					s.series[p.name] = append(s.series[p.name], sample{at: time.Since(start),
						rss: m["process_resident_memory_bytes"], gor: m["go_goroutines"], heap: m["go_memstats_heap_inuse_bytes"],
						goHeld: m["go_memstats_sys_bytes"] - m["go_memstats_heap_released_bytes"], threads: m["go_threads"]})
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) finish() map[string][]sample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.series
}

// trend is the least-squares slope of v over the samples times their
// span: the growth a straight line through them shows.
func trend(ss []sample, v func(sample) float64) (growth, median float64) {
	if len(ss) < 3 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	vals := make([]float64, len(ss))
	for i, s := range ss {
		x, y := s.at.Seconds(), v(s)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		vals[i] = y
	}
	n := float64(len(ss))
	slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	sort.Float64s(vals)
	return slope * (ss[len(ss)-1].at - ss[0].at).Seconds(), vals[len(vals)/2]
}

// highWater is the highest v of the samples.
func highWater(ss []sample, v func(sample) float64) float64 {
	var top float64
	for i, s := range ss {
		if i == 0 || v(s) > top {
			top = v(s)
		}
	}
	return top
}

// median is the median v of the samples.
func median(ss []sample, v func(sample) float64) float64 {
	vals := make([]float64, len(ss))
	for i, s := range ss {
		vals[i] = v(s)
	}
	sort.Float64s(vals)
	return vals[len(vals)/2]
}

// abandoned is an upload begun, half sent and never committed.
type abandoned struct {
	front, id, user string
	at              time.Time
}

// poison is a bad input uploaded through the SDK: refused before the
// acknowledgement (refused has the reason) or acknowledged (id) and then
// expected to end failed.
type poison struct {
	kind, id, refused string
}

func poisons(t *testing.T) map[string][]byte {
	dir := filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata")
	jpg, err := os.ReadFile(filepath.Join(dir, "photos", "plasma_DarkestHour.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), jpg...)
	for i := len(corrupt) / 2; i < len(corrupt)-2; i += 97 {
		corrupt[i] ^= 0x5a
	}
	truncated, err := os.ReadFile(filepath.Join(dir, "bad", "truncated.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	bomb, err := os.ReadFile(filepath.Join(dir, "bad", "bomb.png"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"corrupt-after-header.jpg": corrupt,
		"truncated.jpg":            truncated,
		"text.jpg":                 []byte("<html>not a photo</html>\n"),
		"oversize-45mp.jpg":        sofPixels(t, jpg, 7800, 5800),
		"bomb.png":                 bomb,
	}
}

// sofPixels returns a JPEG whose SOF header claims w x h.
func sofPixels(t *testing.T, jpg []byte, w, h int) []byte {
	b := append([]byte(nil), jpg...)
	for i := 2; i+9 < len(b); {
		if b[i] != 0xFF {
			break
		}
		m, n := b[i+1], int(b[i+2])<<8|int(b[i+3])
		if m >= 0xC0 && m <= 0xC3 {
			b[i+5], b[i+6], b[i+7], b[i+8] = byte(h>>8), byte(h), byte(w>>8), byte(w)
			return b
		}
		i += 2 + n
	}
	t.Fatal("no SOF marker")
	return nil
}

func (c *localCluster) setKnobs(knobs map[string]string, why string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.master.SetFlex(ctx, &willowv1.SetFlexRequest{Token: c.file.OncallToken, Knobs: knobs, Reason: "soak: " + why}); err != nil {
		c.t.Errorf("SetFlex %v: %v", knobs, err)
		return
	}
	c.t.Logf("knobs %v (%s)", knobs, why)
}

// front returns an Upload client of the front at addr with operator
// credentials (Drain, BufferStatus, GetMedia).
func (c *localCluster) front(addr string) willowv1.UploadClient {
	conn, err := c.ops.Conn(addr)
	if err != nil {
		c.t.Fatal(err)
	}
	return willowv1.NewUploadClient(conn)
}

func (c *localCluster) drainAll(ps []proc, wait bool) {
	for _, p := range ps {
		if p.role != "upload" {
			continue
		}
		for _, pool := range []int32{1, 2} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			dr, err := c.front(p.addr).Drain(ctx, &willowv1.DrainRequest{Pool: pool, Wait: wait})
			cancel()
			if err != nil {
				if !wait && status.Code(err) == codes.Unavailable {
					continue // a front being restarted
				}
				c.t.Errorf("drain pool %d of %s: %v", pool, p.name, err)
			} else if wait && dr.GetRemaining() != 0 {
				c.t.Errorf("drain pool %d of %s: %d remaining", pool, p.name, dr.GetRemaining())
			}
		}
	}
}

// abandon begins an upload on front p, sends half of body and leaves it.
func (c *localCluster) abandon(p proc, id string, body []byte) error {
	user := "u-abandon"
	tok, err := token.Sign(c.secret, user, "moments", time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	conn, err := c.router.Conn(p.addr)
	if err != nil {
		return err
	}
	uc := willowv1.NewUploadClient(conn)
	ctx, cancel := context.WithTimeout(client.WithToken(client.WithRequest(context.Background(), "moments", user), tok), 20*time.Second)
	defer cancel()
	sum := sha256.Sum256(body)
	if _, err := uc.Begin(ctx, &willowv1.BeginRequest{UploadId: id, Token: tok, Business: "moments", User: user,
		Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(body)), Sha256: hex.EncodeToString(sum[:]), Filename: "abandoned.jpg"}); err != nil {
		return err
	}
	st, err := uc.Chunks(ctx)
	if err != nil {
		return err
	}
	half := len(body) / 2
	for off := 0; off < half; off += client.ChunkSize {
		end := min(off+client.ChunkSize, half)
		if err := st.Send(&willowv1.Chunk{UploadId: id, Offset: int64(off), Data: body[off:end]}); err != nil {
			return err
		}
	}
	_, err = st.CloseAndRecv()
	return err
}

// status of an abandoned upload on its front: NOT_FOUND upload_expired
// once the staging GC removed it.
func (c *localCluster) abandonedStatus(a abandoned) error {
	tok, err := token.Sign(c.secret, a.user, "moments", time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	conn, err := c.router.Conn(a.front)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(client.WithToken(client.WithRequest(context.Background(), "moments", a.user), tok), 10*time.Second)
	defer cancel()
	_, err = willowv1.NewUploadClient(conn).Status(ctx, &willowv1.StatusRequest{UploadId: a.id, User: a.user})
	return err
}

func (c *localCluster) getMedia(id string) (*willowv1.Media, error) {
	var md *willowv1.Media
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.ops.Call(ctx, "upload", "moments", func(ctx context.Context, conn *grpc.ClientConn, _ *willowv1.Endpoint) error {
		var err error
		md, err = willowv1.NewUploadClient(conn).GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		return err
	})
	return md, err
}

func (c *localCluster) dataDisk() (staging, pools, edge map[string]int64) {
	staging, pools, edge = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, p := range c.procs() {
		d := filepath.Join(c.dir, "data", p.name)
		switch p.role {
		case "upload":
			staging[p.name], pools[p.name] = du(filepath.Join(d, "staging")), du(filepath.Join(d, "pools"))
		case "edgecache":
			edge[p.name] = du(d)
		}
	}
	return
}

// dumpProfiles saves every process's heap profile (after a GC; open it
// with go tool pprof) and goroutine dump from its admin /debug/pprof/ (an
// on-call operator's route) into $WILLOW_SOAK_PROFILES as NAME-TAG.heap
// and NAME-TAG.goroutines; nothing without that variable.
func (c *localCluster) dumpProfiles(ps []proc, tag string) {
	dir := os.Getenv("WILLOW_SOAK_PROFILES")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Errorf("profiles: %v", err)
		return
	}
	hc := http.Client{Timeout: 20 * time.Second}
	for _, p := range ps {
		for _, f := range []struct{ path, ext string }{{"heap?gc=1", "heap"}, {"goroutine?debug=1", "goroutines"}} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.admin+"/debug/pprof/"+f.path, nil)
			req.Header.Set("Authorization", "Bearer "+c.file.OncallToken)
			resp, err := hc.Do(req)
			if err != nil {
				c.t.Logf("profile %s of %s: %v", f.ext, p.name, err)
				continue
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				c.t.Errorf("profile %s of %s: %s %v", f.ext, p.name, resp.Status, err)
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, p.name+"-"+tag+"."+f.ext), b, 0o644); err != nil {
				c.t.Errorf("profile: %v", err)
			}
		}
	}
	c.t.Logf("profiles %s of %d processes in %s", tag, len(ps), dir)
}

func mib(n float64) string { return fmt.Sprintf("%.1f MiB", n/(1<<20)) }

func TestSoak(t *testing.T) {
	dur := soakGate(t)
	cfg := filepath.Join(t.TempDir(), "upload.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("upload:\n  staging_ttl: %s\n", soakStagingTTL)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WILLOW_LOCAL_UPLOAD_CONFIG", cfg)
	t.Setenv("WILLOW_LOCAL_EDGE_DISK_BYTES", strconv.Itoa(soakEdgeDisk))
	t.Setenv("WILLOW_LOCAL_EDGE_MEM_BYTES", strconv.Itoa(soakEdgeMem))
	c := startCluster(t)
	ps := c.procs()
	var fronts []proc
	for _, p := range ps {
		if p.role == "upload" {
			fronts = append(fronts, p)
		}
	}
	// JPEG variants by default: HEIC encodes take seconds to tens of
	// seconds a photo on a shared 2-core box, and the compress backlog
	// would outlast the soak. WILLOW_SOAK_CODEC=heic soaks the normal path
	// (a box with the cores for it: docs/operations.md).
	codec := "jpeg"
	if v := os.Getenv("WILLOW_SOAK_CODEC"); v != "" {
		codec = v
	}
	c.setKnobs(map[string]string{"pool1_drain_per_s": "20", "image_codec": codec}, "pool 1 drains while forced; compress keeps up")
	st0, pl0, ed0 := c.dataDisk()
	t.Logf("soak: %v on deploy/local (%d processes sampled every %v), staging_ttl %v", dur, len(ps), soakSample, soakStagingTTL)

	start, done, errc := runLoad(c, dur, 0.25, 2)
	smp := startSampler(ps, start)
	stopProbe := startProber(t, c)

	var mu sync.Mutex
	var aband []abandoned
	var bad []poison
	var events []string
	event := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		e := fmt.Sprintf("%6.1fs ", time.Since(start).Seconds()) + fmt.Sprintf(f, a...)
		events = append(events, e)
		t.Log(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	// Pools forced on and off, with drains.
	wg.Add(1)
	go func() {
		defer wg.Done()
		modes := []map[string]string{
			{"pool1": "force", "pool2": "off"},
			{"pool1": "off", "pool2": "force"},
			{"pool1": "off", "pool2": "off"},
			{"pool1": "force", "pool2": "force"},
			{"pool1": "auto", "pool2": "auto"},
		}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(dur / 12):
			}
			m := modes[i%len(modes)]
			c.setKnobs(m, fmt.Sprint("pool cycle ", i))
			if m["pool1"] != "force" || m["pool2"] != "force" {
				c.drainAll(fronts, false)
				event("pools %v, drains started on every front", m)
			} else {
				event("pools %v", m)
			}
		}
	}()
	// Abandoned uploads, every 15 s on a front in turn.
	wg.Add(1)
	go func() {
		defer wg.Done()
		body, err := os.ReadFile(filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata", "photos", "Dragonfly_by_Bolly.jpg"))
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(15 * time.Second):
			}
			p := fronts[i%len(fronts)]
			id := fmt.Sprintf("abandoned-%d-%d", start.Unix(), i)
			b := append(append([]byte(nil), body...), byte(i)) // distinct bytes
			if err := c.abandon(p, id, b); err != nil {
				event("abandon %s on %s: %s", id, p.name, rpcstatus.Line(err))
				continue
			}
			mu.Lock()
			aband = append(aband, abandoned{front: p.addr, id: id, user: "u-abandon", at: time.Now()})
			mu.Unlock()
		}
	}()
	// Each abandoned upload is expired (NOT_FOUND upload_expired) once
	// staging_ttl and a GC run have passed; checked while its tombstone
	// lives, the last ones during the settling below.
	var expiredOK, expiredBad int
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for i := 0; ; i++ {
			mu.Lock()
			n := len(aband)
			var a abandoned
			if i < n {
				a = aband[i]
			}
			mu.Unlock()
			if i >= n {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(time.Second)
				i--
				continue
			}
			time.Sleep(time.Until(a.at.Add(soakStagingTTL + soakGCInterval + 10*time.Second)))
			err := c.abandonedStatus(a)
			if status.Code(err) == codes.NotFound && rpcstatus.Reason(err) == upload.ReasonUploadExpired {
				expiredOK++
			} else {
				expiredBad++
				t.Errorf("abandoned upload %s, %v old: Status = %s, want NOT_FOUND upload_expired", a.id, time.Since(a.at).Round(time.Second), rpcstatus.Line(err))
			}
		}
	}()
	// Poison photos, every 20 s, kinds in turn.
	wg.Add(1)
	go func() {
		defer wg.Done()
		pz := poisons(t)
		kinds := make([]string, 0, len(pz))
		for k := range pz {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Second):
			}
			k := kinds[i%len(kinds)]
			body := append(append([]byte(nil), pz[k]...), []byte(fmt.Sprint(i))...)
			if k == "text.jpg" {
				body = []byte(fmt.Sprintf("<html>not a photo %d</html>\n", i))
			}
			uctx, ucancel := context.WithTimeout(ctx, time.Minute)
			res, err := c.client.Upload(uctx, bytes.NewReader(body), int64(len(body)), client.UploadOptions{
				UploadID: fmt.Sprintf("poison-%d-%d", start.Unix(), i), User: "u-poison", Business: "moments", Filename: k})
			ucancel()
			p := poison{kind: k}
			switch {
			case res != nil && res.ID != "":
				p.id = res.ID // acknowledged; failed now or later
			case err != nil && status.Code(err) == codes.InvalidArgument:
				p.refused = rpcstatus.Reason(err)
			case err != nil:
				event("poison %s: %s (not counted)", k, rpcstatus.Line(err))
				continue
			}
			mu.Lock()
			bad = append(bad, p)
			mu.Unlock()
		}
	}()
	// A front and an edge killed -9 and restarted, in the first half.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, k := range []struct {
			at   float64
			name string
		}{{0.2, "upload-a-1"}, {0.3, "edgecache-a-1"}} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(time.Duration(k.at * float64(dur))))):
			}
			c.kill(k.name)
			event("kill -9 %s", k.name)
			time.Sleep(3 * time.Second)
			c.restart(k.name)
			event("restarted %s", k.name)
		}
	}()
	// Profiles at a quarter, the middle and the end of the load, and after
	// settling ($WILLOW_SOAK_PROFILES).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, q := range []int{1, 2} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(dur * time.Duration(q) / 4))):
			}
			c.dumpProfiles(ps, fmt.Sprintf("q%d", q))
		}
	}()
	wg.Wait()
	c.dumpProfiles(ps, "end")
	if err := <-errc; err != nil {
		t.Errorf("load run: %v", err)
	}
	rep := <-done
	probes := stopProbe()
	loadEnd := time.Since(start)
	event("load done")

	stagingBound := func() int64 {
		return stagingBase + stagingPerUpload*int64(rep.Totals.Upload.Succeeded+len(c.probeIDs))
	}
	// Settle: pools off and drained, compress caught up, staging expired.
	c.setKnobs(map[string]string{"pool1": "off", "pool2": "off", "pool1_drain_per_s": "100"}, "settle")
	c.drainAll(fronts, true)
	journal := func() (float64, error) {
		var sum float64
		for _, p := range fronts {
			m, err := scrape(p.admin, "willow_upload_journal_depth")
			if err != nil {
				return 0, err
			}
			sum += m["willow_upload_journal_depth"]
		}
		return sum, nil
	}
	settleStart := time.Now()
	var depth float64
	for {
		d, err := journal()
		depth = d
		if err == nil && d == 0 {
			break
		}
		if time.Since(settleStart) > 6*time.Minute {
			t.Errorf("compress journals still hold %v jobs %v after the load (err %v)", d, time.Since(settleStart).Round(time.Second), err)
			break
		}
		time.Sleep(2 * time.Second)
	}
	journalDrained := time.Since(settleStart)
	event("compress journals empty (depth %v)", depth)
	// Every abandoned upload is older than staging_ttl + one GC run.
	mu.Lock()
	lastAband := time.Time{}
	if len(aband) > 0 {
		lastAband = aband[len(aband)-1].at
	}
	mu.Unlock()
	var st1, pl1, ed1 map[string]int64
	deadline := time.Now().Add(soakStagingTTL + soakGCInterval + time.Minute)
	if d := lastAband.Add(soakStagingTTL + soakGCInterval + time.Minute); d.After(deadline) {
		deadline = d
	}
	for {
		st1, pl1, ed1 = c.dataDisk()
		within := true
		for n, b := range st1 {
			within = within && b <= stagingBound() && pl1[n] <= poolBound
		}
		if within && time.Now().After(lastAband.Add(soakStagingTTL+soakGCInterval+5*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	settled := time.Since(settleStart)
	event("settled")
	c.dumpProfiles(ps, "settled")
	series := smp.finish()
	if dir := os.Getenv("WILLOW_SOAK_PROFILES"); dir != "" {
		var b strings.Builder
		b.WriteString("process\tat_s\trss\tgoroutines\theap_inuse\tgo_held\tthreads\n")
		for n, ss := range series {
			for _, x := range ss {
				fmt.Fprintf(&b, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n", n, x.at.Seconds(), x.rss, x.gor, x.heap, x.goHeld, x.threads)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "series.tsv"), []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}

	// Disk.
	t.Logf("disk use per process (start -> end of load + settle %v):", settled.Round(time.Second))
	for _, p := range fronts {
		t.Logf("  %-14s staging %8d -> %8d B   pools %8d -> %8d B", p.name, st0[p.name], st1[p.name], pl0[p.name], pl1[p.name])
		if st1[p.name] > stagingBound() {
			t.Errorf("%s staging uses %d bytes after the soak, bound %d", p.name, st1[p.name], stagingBound())
		}
		if pl1[p.name] > poolBound {
			t.Errorf("%s pools use %d bytes after the soak, bound %d", p.name, pl1[p.name], poolBound)
		}
	}
	for _, p := range ps {
		if p.role != "edgecache" {
			continue
		}
		t.Logf("  %-14s edge disk tier %8d -> %8d B (capacity %d)", p.name, ed0[p.name], ed1[p.name], soakEdgeDisk)
		if ed1[p.name] > soakEdgeDisk*21/20 {
			t.Errorf("%s disk tier uses %d bytes, capacity %d", p.name, ed1[p.name], soakEdgeDisk)
		}
	}

	// Abandoned uploads expired; poison photos failed, once.
	<-checked
	t.Logf("abandoned uploads: %d begun and half sent, %d answered NOT_FOUND upload_expired after staging_ttl + a GC run, %d not",
		len(aband), expiredOK, expiredBad)
	if len(aband) == 0 {
		t.Error("no abandoned upload was made")
	}
	byKind := map[string]map[string]int{}
	for _, p := range bad {
		if byKind[p.kind] == nil {
			byKind[p.kind] = map[string]int{}
		}
		if p.refused != "" {
			byKind[p.kind]["refused "+p.refused]++
			continue
		}
		md, err := c.getMedia(p.id)
		switch {
		case err != nil:
			t.Errorf("poison %s (%s): GetMedia: %s", p.kind, p.id, rpcstatus.Line(err))
		case md.GetState() != "failed":
			t.Errorf("poison %s (%s): state %q after the soak, want failed", p.kind, p.id, md.GetState())
		case md.GetAttempts() > 1:
			t.Errorf("poison %s (%s): failed %s after %d compress attempts, want 1 (never retried by itself)", p.kind, p.id, md.GetReason(), md.GetAttempts())
		default:
			byKind[p.kind]["failed "+md.GetReason()]++
		}
	}
	for k, m := range byKind {
		t.Logf("poison %-26s %v", k, m)
	}
	if len(bad) == 0 {
		t.Error("no poison upload was made")
	}

	// Nothing acknowledged lost.
	lostProbes := 0
	for _, p := range c.probeIDs {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		h := sha256.New()
		_, err := c.client.Download(dctx, p.id, "raw", h)
		dcancel()
		if err != nil || hex.EncodeToString(h.Sum(nil)) != p.sha {
			lostProbes++
			t.Errorf("probe upload %s: %v", p.id, err)
		}
	}
	tot := rep.Totals
	pOK, pBad := countProbes(probes, start, nil)
	ok, badN := counted(rep, nil)
	t.Logf("load %v: uploads ok %d failed %d rejected %d; downloads ok %d failed %d rejected %d not-ready %d; lost %d pending %d; success %.2f%%",
		dur, tot.Upload.Succeeded, tot.Upload.Failed, tot.Upload.Rejected, tot.Download.Succeeded, tot.Download.Failed,
		tot.Download.Rejected, tot.Download.NotReady, tot.Lost, tot.Pending, pct(ok, badN))
	t.Logf("probe: %d probe uploads, %d not downloadable intact at the end; probe requests %d/%d ok", len(c.probeIDs), lostProbes, pOK, pOK+pBad)
	for r, n := range tot.Rejections {
		t.Logf("  rejection %s: %d", r, n)
	}
	if tot.Lost != 0 || lostProbes != 0 {
		t.Errorf("acknowledged uploads lost: %d of the load generator's, %d probes", tot.Lost, lostProbes)
	}
	if tot.Upload.Succeeded == 0 {
		t.Error("no upload succeeded")
	}

	// RSS and goroutines flat over the last half of the load: the last
	// quarter's high-water mark stays within a bound of the first half's,
	// and goroutines, once settled idle, within it too (see flatBound).
	half, q4 := loadEnd/2, loadEnd*3/4
	t.Logf("RSS and goroutines: high-water marks of the first half (0..%v) and the last quarter (%v..%v) of the load, and once settled:",
		half.Round(time.Second), q4.Round(time.Second), loadEnd.Round(time.Second))
	t.Logf("  %-14s %21s %10s %10s %14s %12s %10s   %s", "process", "RSS H1 -> Q4", "growth", "bound", "gor H1 -> Q4", "settled", "bound",
		"(last half: RSS trend, Go heap in use, C/other = RSS - Go-held, threads)")
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var h1, last, lastQ, idle []sample
		for _, s := range series[n] {
			switch {
			case s.at < half:
				h1 = append(h1, s)
			case s.at <= loadEnd:
				last = append(last, s)
				if s.at >= q4 {
					lastQ = append(lastQ, s)
				}
			case s.at > loadEnd+settled-time.Minute:
				idle = append(idle, s)
			}
		}
		if len(h1) < 6 || len(lastQ) < 6 || len(idle) < 3 {
			t.Errorf("%s: %d samples in the first half, %d in the last quarter, %d in the last settled minute: too few to judge", n, len(h1), len(lastQ), len(idle))
			continue
		}
		rss := func(s sample) float64 { return s.rss }
		gor := func(s sample) float64 { return s.gor }
		other := func(s sample) float64 { return s.rss - s.goHeld }
		rH1, rQ4 := highWater(h1, rss), highWater(lastQ, rss)
		gH1, gQ4 := highWater(h1, gor), highWater(lastQ, gor)
		_, rm := trend(last, rss)
		_, gm := trend(last, gor)
		rLim, gLim := max(rssGrowFrac*rm, rssGrowAbs), max(gorGrowFrac*gm, gorGrowAbs)
		gIdle := median(idle, gor)
		rg, _ := trend(last, rss)
		_, hm := trend(last, func(s sample) float64 { return s.heap })
		_, tm := trend(last, func(s sample) float64 { return s.threads })
		t.Logf("  %-14s %9s -> %9s %+10s %10s %6.0f -> %5.0f %12.0f %10.0f   %+.1f MiB, heap %s, C/other %s -> %s, threads %.0f",
			n, mib(rH1), mib(rQ4), mib(rQ4-rH1), mib(rLim), gH1, gQ4, gIdle, gLim,
			rg/(1<<20), mib(hm), mib(highWater(h1, other)), mib(highWater(lastQ, other)), tm)
		if rQ4-rH1 > rLim {
			t.Errorf("%s: RSS rose over the last half: high-water %s in the last quarter against %s in the first half (+%s), bound %s",
				n, mib(rQ4), mib(rH1), mib(rQ4-rH1), mib(rLim))
		}
		if gQ4-gH1 > gLim {
			t.Errorf("%s: goroutines rose over the last half: high-water %.0f in the last quarter against %.0f in the first half, bound +%.0f", n, gQ4, gH1, gLim)
		}
		if gIdle-gH1 > gLim {
			t.Errorf("%s: %.0f goroutines once settled idle, against a first-half high-water of %.0f, bound +%.0f: some outlive their work", n, gIdle, gH1, gLim)
		}
	}
	if n := len(smp.errs); n > 0 {
		t.Logf("scrape gaps (process down or slow): %v", smp.errs)
	}
	t.Logf("compress journals empty %v after the load; settled %v after it", journalDrained.Round(time.Second), settled.Round(time.Second))
}
