package edgecache_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"willow/edgecache"
	"willow/internal/testenv"
	"willow/media"
)

// load runs concurrency clients fetching random URLs through client with
// keep-alive for d, and returns the completed requests and the time taken.
// Every response must be 200 with size bytes.
func load(client *http.Client, urls []string, size int, concurrency int, d time.Duration, seed uint64) (int64, time.Duration, error) {
	var done, failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), seed))
			for time.Now().Before(deadline) {
				resp, err := client.Get(urls[rng.IntN(len(urls))])
				if err != nil {
					failed.Add(1)
					continue
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n != int64(size) {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return 0, 0, fmt.Errorf("%d failed requests", f)
	}
	return done.Load(), time.Since(start), nil
}

// Environment of the load client process.
const (
	envLoadURLs        = "EDGECACHE_LOAD_URLS" // file of "TARGET URL" lines
	envLoadSize        = "EDGECACHE_LOAD_SIZE"
	envLoadConcurrency = "EDGECACHE_LOAD_CONCURRENCY"
	// envBenchConns "new": every slice opens new connections (default:
	// the client keeps its connections for the whole run).
	envBenchConns = "EDGECACHE_BENCH_CONNS"
)

// TestLoadClientProcess is the load client when the benchmark runs this
// test binary as a child process (so that the client's CPU is never in the
// process under test); in a normal run it skips, saying so. It keeps one
// pool of keep-alive connections per target for its whole life and runs
// one slice of load per command line "TARGET DURATION" on its input,
// answering "LOAD REQUESTS NANOSECONDS CPU-NANOSECONDS" (the client's own
// CPU time over the slice).
func TestLoadClientProcess(t *testing.T) {
	file := os.Getenv(envLoadURLs)
	if file == "" {
		t.Skip("the load-client child process of the throughput benchmarks (newLoadClient sets " + envLoadURLs + ")")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := strconv.Atoi(os.Getenv(envLoadSize))
	conc, _ := strconv.Atoi(os.Getenv(envLoadConcurrency))
	urls := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		if target, u, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			urls[target] = append(urls[target], u)
		}
	}
	clients := map[string]*http.Client{}
	for target := range urls {
		tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, DisableCompression: true}
		defer tr.CloseIdleConnections()
		clients[target] = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	newConns := os.Getenv(envBenchConns) == "new"
	in := bufio.NewScanner(os.Stdin)
	for seed := uint64(7); in.Scan(); seed++ {
		target, ds, _ := strings.Cut(in.Text(), " ")
		d, err := time.ParseDuration(ds)
		if err != nil || clients[target] == nil {
			t.Fatalf("bad command %q", in.Text())
		}
		if newConns {
			// The slice opens its own connections, as a client process of
			// its own would: the target's accept and close are in it.
			clients[target].Transport.(*http.Transport).CloseIdleConnections()
		}
		c0 := selfCPU()
		n, took, err := load(clients[target], urls[target], size, conc, d, seed)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("LOAD %d %d %d\n", n, took.Nanoseconds(), (selfCPU() - c0).Nanoseconds())
	}
}

// loadClient is the load client child process of one benchmark run.
type loadClient struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// newLoadClient starts the load client for targets (name: URLs), with
// concurrency connections to each, every response checked for size bytes.
func newLoadClient(b *testing.B, targets map[string][]string, size, concurrency int) *loadClient {
	b.Helper()
	var lines []string
	for target, us := range targets {
		for _, u := range us {
			lines = append(lines, target+" "+u)
		}
	}
	f := filepath.Join(b.TempDir(), "urls")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		b.Fatal(err)
	}
	lc := &loadClient{cmd: exec.Command(os.Args[0], "-test.run=^TestLoadClientProcess$", "-test.count=1")}
	lc.cmd.Env = append(os.Environ(), envLoadURLs+"="+f, envLoadSize+"="+strconv.Itoa(size),
		envLoadConcurrency+"="+strconv.Itoa(concurrency))
	lc.cmd.Stderr = &lc.stderr
	lc.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if lc.in, err = lc.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	out, err := lc.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	lc.out = bufio.NewScanner(out)
	if err := lc.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		lc.in.Close()
		lc.cmd.Wait()
	})
	return lc
}

// run runs one slice of load on target for d and returns the requests
// completed, the time taken and the client's CPU time over it.
func (lc *loadClient) run(b *testing.B, target string, d time.Duration) (int64, time.Duration, time.Duration) {
	b.Helper()
	if _, err := fmt.Fprintf(lc.in, "%s %s\n", target, d); err != nil {
		b.Fatalf("load client: %v\n%s", err, lc.stderr.String())
	}
	for lc.out.Scan() {
		var n, ns, cpu int64
		if _, err := fmt.Sscanf(lc.out.Text(), "LOAD %d %d %d", &n, &ns, &cpu); err == nil {
			return n, time.Duration(ns), time.Duration(cpu)
		}
	}
	lc.cmd.Wait()
	b.Fatalf("load client ended: %s\n%s", lc.cmd.ProcessState, lc.stderr.String())
	return 0, 0, 0
}

// startNginx serves root on a free loopback port with a generated config
// (daemon off) until the benchmark ends: as many workers as the edge has
// cores (GOMAXPROCS 2 here; EDGECACHE_BENCH_NGINX_WORKERS=N sets it),
// listening with reuseport (EDGECACHE_BENCH_NGINX_REUSEPORT=0: one shared
// socket), sendfile and tcp_nopush as cfg says, no access log, and
// open_file_cache, as the edge keeps its disk files open. cpu reads
// the CPU time nginx's master and worker processes have used so far, in
// all and each (master first).
func startNginx(b *testing.B, root string, cfg nginxConfig) (addr string, cpu func() (time.Duration, []time.Duration)) {
	b.Helper()
	bin := "/usr/sbin/nginx"
	if _, err := os.Stat(bin); err != nil {
		bin = testenv.LookPath(b, "nginx")
	}
	dir := b.TempDir()
	addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	workers := strconv.Itoa(runtime.GOMAXPROCS(0))
	if w := os.Getenv("EDGECACHE_BENCH_NGINX_WORKERS"); w != "" {
		workers = w
	}
	// reuseport: a listening socket per worker, the kernel spreading new
	// connections over them evenly. Without it the persistent connections
	// of a run often all land on one worker (one core for nginx).
	reuseport := " reuseport"
	if os.Getenv("EDGECACHE_BENCH_NGINX_REUSEPORT") == "0" {
		reuseport = ""
	}
	onOff := map[bool]string{true: "on", false: "off"}
	conf := fmt.Sprintf(`daemon off;
user root;
worker_processes %[4]s;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile %[7]s;
  tcp_nopush %[6]s;
  open_file_cache max=1000 inactive=60s;
  keepalive_requests 1000000;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen %[2]s%[5]s;
    root %[3]s;
    default_type image/heic;
    add_header Cache-Control "public, max-age=31536000, immutable";
  }
}
`, dir, addr, root, workers, reuseport, onOff[cfg.nopush], onOff[cfg.sendfile])
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", cf, "-e", filepath.Join(dir, "error.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	closeInheritedOnExec(b)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// nginx and its workers are their own process group: killed at the
	// end, and when this process is told to stop (a timeout's SIGTERM)
	// before its cleanups could run.
	group := -cmd.Process.Pid
	nginxGroups.add(group)
	b.Cleanup(func() {
		nginxGroups.remove(group)
		syscall.Kill(group, syscall.SIGKILL)
		cmd.Wait()
	})
	if err := testenv.WaitTCP(addr, 5*time.Second); err != nil {
		b.Fatalf("nginx: %v", err)
	}
	pid := cmd.Process.Pid
	return addr, func() (time.Duration, []time.Duration) {
		pids := []string{strconv.Itoa(pid)}
		if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
			pids = append(pids, strings.Fields(string(c))...)
		}
		var t time.Duration
		var each []time.Duration
		for _, p := range pids {
			c := procCPU(b, p)
			t += c
			each = append(each, c)
		}
		return t, each
	}
}

// nginxGroups are the process groups of the nginx servers running, all
// killed when this process is told to stop (one handler, so that none is
// left behind by another's exit).
var nginxGroups = &procGroups{groups: map[int]bool{}}

type procGroups struct {
	once   sync.Once
	mu     sync.Mutex
	groups map[int]bool
}

func (g *procGroups) add(group int) {
	g.once.Do(func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		go func() {
			s := <-sigs
			g.mu.Lock()
			for group := range g.groups {
				syscall.Kill(group, syscall.SIGKILL)
			}
			fmt.Fprintf(os.Stderr, "%v: nginx killed\n", s)
			os.Exit(2)
		}()
	})
	g.mu.Lock()
	g.groups[group] = true
	g.mu.Unlock()
}

func (g *procGroups) remove(group int) {
	g.mu.Lock()
	delete(g.groups, group)
	g.mu.Unlock()
}

// closeInheritedOnExec marks the descriptors this process inherited
// close-on-exec, so that nginx and the load client do not hold them: a
// bench lock taken by `flock LOCK go test ...` is released when this
// process ends, not when an nginx left behind does.
func closeInheritedOnExec(b *testing.B) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// procCPU is a process's user+system CPU time from /proc/PID/stat.
func procCPU(b *testing.B, pid string) time.Duration {
	st, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which is in parentheses): utime and
	// stime are the 12th and 13th, in clock ticks (100 Hz on Linux).
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+stt) * 10 * time.Millisecond
}

// selfCPU is this process's user+system CPU time (the edge under test;
// the load client is a child process and not counted).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nginxConfig is one nginx of the benchmark.
type nginxConfig struct {
	name string
	// sendfile: the body by sendfile(2) from the page cache; off, nginx
	// reads the file into its output buffers (2 of 32 KiB, the default)
	// and writes them.
	sendfile bool
	// nopush: TCP_CORK around a sendfile response; off, the header is
	// written before the sendfile.
	nopush bool
}

// nginxConfigs: tcp_nopush on was the config of sessions 6-11, off is the
// faster with sendfile since session 12, and sendfile off is faster still
// at 100 KiB on loopback (session 14: the load client's receive of
// copied buffers is cheaper than of page-cache pages).
var nginxConfigs = []nginxConfig{
	{name: "nginx-push", sendfile: true, nopush: true},
	{name: "nginx-nopush", sendfile: true},
	{name: "nginx-nosendfile"},
}

// BenchmarkHTTPvsNginx measures cached-hit HTTP throughput of the edge
// cache for 100 KiB and 1 MiB objects (photo variants; a short video's
// first slice) against nginx serving the same files, with the same load
// client (32 keep-alive connections to each, 5 s each) in the same run.
// nginx runs three times, in the configs of nginxConfigs (each is the
// fastest on some rows on this box, BENCHMARKS.md), and the edge's ratio
// is given against the fastest of them in the run (edge/nginx-%) and
// against each. EDGECACHE_BENCH_NGINX=push,nosendfile (names without
// "nginx-", comma-separated) runs only those.
// The load client is this test binary run as a child process, so no
// target shares a process with it; it lives for the whole run and keeps
// its connections to every target open, so that a slice measures requests,
// not connection set-up, for all alike.
// The targets alternate in 250 ms slices (the order rotated every
// round) so that load from other processes on the machine hits them alike.
//
//	go test -run '^$' -bench HTTPvsNginx -benchtime 1x ./edgecache
//
// EDGECACHE_BENCH_SIZE_KIB=N runs one size of N KiB instead (200 objects),
// for finding where sendfile starts to pay; EDGECACHE_BENCH_SLICE=D sets
// the slice (a Go duration).
func BenchmarkHTTPvsNginx(b *testing.B) {
	if kib, _ := strconv.Atoi(os.Getenv("EDGECACHE_BENCH_SIZE_KIB")); kib > 0 {
		b.Run(fmt.Sprintf("size=%dKiB", kib), func(b *testing.B) { benchHTTPvsNginx(b, 200, kib<<10) })
		return
	}
	b.Run("size=100KiB", func(b *testing.B) { benchHTTPvsNginx(b, 200, 100<<10) })
	b.Run("size=1MiB", func(b *testing.B) { benchHTTPvsNginx(b, 48, 1<<20) }) // within S4LRU's first segment
}

// benchTarget is one server of the benchmark and what its slices gave.
type benchTarget struct {
	name string
	urls []string
	cpu  func() time.Duration // the server's CPU time so far
	// per process (nginx: master first), for the log; nil for the edge
	each func() []time.Duration

	n              int64         // requests completed
	took, srv, cli time.Duration // wall time, server and client CPU
}

func (t *benchTarget) reqPerSec() float64 { return float64(t.n) / t.took.Seconds() }

// cpuPerReq is the server's CPU per request in µs.
func (t *benchTarget) cpuPerReq() float64 { return t.srv.Seconds() * 1e6 / float64(t.n) }

// clientPerReq is the load client's CPU per request to t in µs.
func (t *benchTarget) clientPerReq() float64 { return t.cli.Seconds() * 1e6 / float64(t.n) }

func benchHTTPvsNginx(b *testing.B, objects, size int) {
	const (
		concurrency = 32
		duration    = 5 * time.Second
	)
	slice := 250 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("EDGECACHE_BENCH_SLICE")); err == nil && d > 0 {
		slice = d
	}
	st := newStore(b)
	root := b.TempDir()
	var paths []string
	for i := range objects {
		data := payload(size, byte(i))
		id := put(b, st, media.LocStore, i, media.VariantMedium, "image/heic", data)
		p := path(id, media.VariantMedium)
		paths = append(paths, p)
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// The edge with its disk tier on the file system nginx serves from:
	// hits are sent from the tier's files, as nginx sends its own.
	cfg := edgecache.Config{DiskDir: b.TempDir()}
	if os.Getenv("EDGECACHE_BENCH_NO_DISK") != "" {
		cfg.DiskDir = "" // hits written from the memory tier
	}
	if os.Getenv("EDGECACHE_BENCH_NO_HIT_PATH") != "" {
		cfg.NoHitPath = true // every request through net/http
	}
	if v := os.Getenv("EDGECACHE_BENCH_SENDFILE_MIN"); v != "" {
		cfg.SendfileMinBytes, _ = strconv.ParseInt(v, 10, 64) // where sendfile starts
	}
	e := startEdge(b, "edge-a-1", cfg, edgecache.Deps{Store: st})
	urls := func(base string) []string {
		var us []string
		for _, p := range paths {
			us = append(us, base+p)
		}
		return us
	}
	targets := []*benchTarget{{name: "edge", urls: urls(e.url), cpu: selfCPU}}
	only := os.Getenv("EDGECACHE_BENCH_NGINX")
	for _, nc := range nginxConfigs {
		if only != "" && !slices.Contains(strings.Split(only, ","), strings.TrimPrefix(nc.name, "nginx-")) {
			continue
		}
		addr, cpu := startNginx(b, root, nc)
		name := nc.name
		targets = append(targets, &benchTarget{name: name, urls: urls("http://" + addr),
			cpu:  func() time.Duration { t, _ := cpu(); return t },
			each: func() []time.Duration { _, each := cpu(); return each }})
	}
	// Warm: every object cached at the edge, every file in the page cache.
	all := map[string][]string{}
	for _, t := range targets {
		all[t.name] = t.urls
		for _, u := range t.urls {
			resp, err := http.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || n != int64(size) {
				b.Fatalf("warming %s: %s, %d bytes", u, resp.Status, n)
			}
		}
	}
	lc := newLoadClient(b, all, size, concurrency)
	if n, _ := strconv.Atoi(os.Getenv("EDGECACHE_BENCH_EDGE_PROCS")); n > 0 {
		// The edge's process on n Ps (nginx keeps its workers).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	for _, t := range targets {
		lc.run(b, t.name, time.Second) // the client's connections opened, the servers hot
	}
	if n := st.gets.Load(); n != int64(objects) {
		b.Fatalf("%d origin reads while warming, want %d", n, objects)
	}
	each0 := map[string][]time.Duration{}
	for _, t := range targets {
		if t.each != nil {
			each0[t.name] = t.each()
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, t := range targets {
			t.n, t.took, t.srv, t.cli = 0, 0, 0, 0
		}
		for r := range int(duration / slice) {
			for k := range targets {
				t := targets[(r+k)%len(targets)] // each target first in turn
				c0 := t.cpu()
				n, d, lcCPU := lc.run(b, t.name, slice)
				t.n, t.took, t.srv, t.cli = t.n+n, t.took+d, t.srv+t.cpu()-c0, t.cli+lcCPU
			}
		}
		edge, best := targets[0], targets[1]
		for _, t := range targets[2:] {
			if t.reqPerSec() > best.reqPerSec() {
				best = t
			}
		}
		// Server CPU per request: steadier than req/s on a loaded machine,
		// where the load client and other processes take the cores. The
		// load client's CPU per request to each: what a server's answers
		// cost the client (its reads and wake-ups) is in the req/s.
		b.ReportMetric(100*edge.reqPerSec()/best.reqPerSec(), "edge/nginx-%")
		b.ReportMetric(100*best.cpuPerReq()/edge.cpuPerReq(), "nginx/edge-%cpu")
		line := fmt.Sprintf("edge %.0f req/s (CPU %.0f us, client %.0f us)", edge.reqPerSec(), edge.cpuPerReq(), edge.clientPerReq())
		for _, t := range targets {
			b.ReportMetric(t.reqPerSec(), t.name+"-req/s")
			b.ReportMetric(t.cpuPerReq(), t.name+"-cpu-us/req")
			b.ReportMetric(t.clientPerReq(), "client-"+t.name+"-cpu-us/req")
			if t != edge {
				b.ReportMetric(100*edge.reqPerSec()/t.reqPerSec(), "edge/"+t.name+"-%")
				line += fmt.Sprintf("; %s %.0f req/s: %.0f%% (CPU %.0f us, client %.0f us)",
					t.name, t.reqPerSec(), 100*edge.reqPerSec()/t.reqPerSec(), t.cpuPerReq(), t.clientPerReq())
			}
		}
		b.Logf("%s; against the faster, %s: %.1f%%", line, best.name, 100*edge.reqPerSec()/best.reqPerSec())
	}
	for _, t := range targets {
		if t.each == nil {
			continue
		}
		if each := t.each(); len(each) == len(each0[t.name]) {
			// How nginx's work spread over its master and workers.
			for i := range each {
				each[i] -= each0[t.name][i]
			}
			b.Logf("%s CPU by process (master first): %v", t.name, each)
		}
	}
	if n := st.gets.Load(); n != int64(objects) {
		b.Fatalf("%d origin reads, want %d: the run was not all hits", n, objects)
	}
}

// discardWriter is a ResponseWriter that drops the body.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// cachedHit returns a func serving one cached 100 KiB hit through the
// edge's HTTP handler, without the network (the object is cached first).
func cachedHit(tb testing.TB) func() {
	st := newStore(tb)
	id := put(tb, st, media.LocStore, 1, media.VariantMedium, "image/heic", payload(100<<10, 1))
	e := startEdge(tb, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	h := e.srv.Handler()
	req, _ := http.NewRequest(http.MethodGet, path(id, media.VariantMedium), nil)
	hit := func() { h.ServeHTTP(&discardWriter{h: http.Header{}}, req) }
	hit()
	return hit
}

// BenchmarkHandlerHit measures the handler's own cost for a cached hit,
// without the network.
//
//	go test -run '^$' -bench HandlerHit -benchmem ./edgecache
func BenchmarkHandlerHit(b *testing.B) {
	hit := cachedHit(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		hit()
	}
}

// TestHandlerHitAllocs keeps the cached-hit path's allocations down
// (BENCHMARKS.md, edge vs nginx): the response header values are made
// once per object and shared. The writer and its header map are the
// test's own two.
func TestHandlerHitAllocs(t *testing.T) {
	hit := cachedHit(t)
	n := testing.AllocsPerRun(200, hit)
	if n > 4 {
		t.Errorf("a cached hit allocates %v times, want at most 4 (2 of them the test's writer)", n)
	}
}
