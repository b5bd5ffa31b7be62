package master_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"willow/auth"
	"willow/client"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// The fleet benchmark's master runs in a child process (this test binary
// with WILLOW_FLEET_MASTER_REDIS set), so its CPU time and RSS are its
// own, not the simulated nodes'.
const (
	fleetRedisEnv = "WILLOW_FLEET_MASTER_REDIS"
	// fleetCallerEnv (the master's address) runs the binary as the
	// benchmark's Route caller (fleetCaller).
	fleetCallerEnv = "WILLOW_FLEET_CALLER"
	fleetSecret    = "fleet-cluster-secret"
	fleetOncall    = "fleet-oncall-token"
)

// fleetMaster serves a master with node auth (the cluster secret) and an
// on-call operator on 127.0.0.1, printing "ADDR host:port".
func fleetMaster(redisURL string) int {
	ops, err := auth.ParseOperators([]byte(auth.OperatorLine("fleet", fleetOncall, auth.RoleOncall)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// The master's node as the mains configure it (cmd/internal/daemon).
	n, err := node.New(node.Config{ID: "master-1", Role: "master", Logger: quiet, StreamWorkers: node.MasterStreamWorkers,
		Auth: &auth.Config{ClusterSecret: fleetSecret, Operators: ops}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rdb, err := redisClient(redisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := master.New(master.Config{}, master.Deps{Node: n, Redis: rdb})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	go s.Run(ctx)
	if p, hp, tp, rp := os.Getenv("WILLOW_FLEET_CPUPROFILE"), os.Getenv("WILLOW_FLEET_HEAPPROFILE"), fleetTraceFile("master"), os.Getenv(fleetRuntimeEnv); p != "" || hp != "" || tp != "" || rp != "" {
		// The master's profiles of the measured part of the run: the
		// benchmark sends SIGUSR1 when it starts measuring, SIGUSR2 when
		// it stops. The CPU profile covers the measured part; the heap
		// profile (and HEAPPROFILE.goroutines, every goroutine's stack)
		// is taken at its end; the runtime's own figures (fleetRuntime)
		// are the measured part's.
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			var f, tf *os.File
			var rt0 []metrics.Sample
			for s := range sig {
				switch {
				case s == syscall.SIGUSR1:
					if rp != "" {
						rt0 = readRuntime()
					}
					if f == nil && p != "" {
						if f, err = os.Create(p + ".tmp"); err == nil && pprof.StartCPUProfile(f) != nil {
							f.Close()
							f = nil
						}
					}
					if tf == nil && tp != "" {
						tf = startTrace(tp)
					}
				case s == syscall.SIGUSR2:
					if tf != nil {
						stopTrace(tf, tp)
						tf = nil
					}
					if f != nil {
						pprof.StopCPUProfile()
						f.Close()
						f = nil
						_ = os.Rename(p+".tmp", p) // complete: the benchmark waits for it
					}
					if hp != "" {
						writeProfile(hp+".goroutines", "goroutine", 1)
						writeProfile(hp, "heap", 0)
					}
					if rp != "" && rt0 != nil {
						writeRuntime(rp, rt0, readRuntime())
					}
				}
			}
		}()
	}
	fmt.Println("ADDR", n.Addr())
	if err := n.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fleetRuntimeEnv names the file where the fleet master writes its
// runtime's figures of the measured part (writeRuntime): the benchmark
// sets it in every run.
const fleetRuntimeEnv = "WILLOW_FLEET_RUNTIME"

// fleetRuntime are the runtime/metrics the fleet master reports of the
// measured part: how long its goroutines waited runnable for a P (the
// Go scheduler's latency, which a Route call meets at each hop: the
// transport's reader, the handler, the writer), its goroutines, GC
// cycles and the GC's share of its CPU, and its live heap.
var fleetRuntime = []string{
	"/sched/latencies:seconds",
	"/sched/goroutines:goroutines",
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/gc/heap/live:bytes",
	"/sched/pauses/total/gc:seconds",
}

func readRuntime() []metrics.Sample {
	s := make([]metrics.Sample, len(fleetRuntime))
	for i, n := range fleetRuntime {
		s[i].Name = n
	}
	metrics.Read(s)
	return s
}

// writeRuntime writes "NAME VALUE" lines of the measured part (a, then
// b) to file, whole by rename: the scheduler latency's p50, p99, p99.9
// and max bucket (µs, from the histogram's difference), the goroutines
// and live heap at the end, the GC cycles and the GC's share of the CPU
// in between, and the GC pauses' p99 and max (µs). It finds each metric
// by its name (sample), not by its place in fleetRuntime, and leaves out
// a figure whose metric the runtime does not have (KindBad).
func writeRuntime(file string, a, b []metrics.Sample) {
	sample := func(s []metrics.Sample, name string) (metrics.Value, bool) {
		for _, m := range s {
			if m.Name == name && m.Value.Kind() != metrics.KindBad {
				return m.Value, true
			}
		}
		return metrics.Value{}, false
	}
	both := func(name string, kind metrics.ValueKind) (metrics.Value, metrics.Value, bool) {
		v0, ok0 := sample(a, name)
		v1, ok1 := sample(b, name)
		return v0, v1, ok0 && ok1 && v0.Kind() == kind && v1.Kind() == kind
	}
	var out strings.Builder
	hq := func(label, metric string, qs ...float64) {
		v0, v1, ok := both(metric, metrics.KindFloat64Histogram)
		if !ok {
			return
		}
		labels := map[float64]string{0.5: "p50", 0.99: "p99", 0.999: "p999", 1: "max"}
		h0, h1 := v0.Float64Histogram(), v1.Float64Histogram()
		if len(h0.Counts) != len(h1.Counts) {
			return
		}
		counts := make([]uint64, len(h1.Counts))
		var total uint64
		for k := range counts {
			counts[k] = h1.Counts[k] - h0.Counts[k]
			total += counts[k]
		}
		for _, q := range qs {
			v := 0.0
			if total > 0 {
				want := uint64(math.Ceil(q * float64(total)))
				var seen uint64
				for k, c := range counts {
					seen += c
					if seen >= max(want, 1) {
						v = h1.Buckets[k+1] // the bucket's upper bound
						if math.IsInf(v, 1) {
							v = h1.Buckets[k]
						}
						break
					}
				}
			}
			fmt.Fprintf(&out, "%s-%s-us %g\n", label, labels[q], v*1e6)
		}
	}
	hq("master-sched", "/sched/latencies:seconds", 0.5, 0.99, 0.999, 1)
	hq("master-gc-pause", "/sched/pauses/total/gc:seconds", 0.99, 1)
	if v, ok := sample(b, "/sched/goroutines:goroutines"); ok && v.Kind() == metrics.KindUint64 {
		fmt.Fprintf(&out, "master-goroutines %d\n", v.Uint64())
	}
	if v0, v1, ok := both("/gc/cycles/total:gc-cycles", metrics.KindUint64); ok {
		fmt.Fprintf(&out, "master-gc-cycles %d\n", v1.Uint64()-v0.Uint64())
	}
	g0, g1, okg := both("/cpu/classes/gc/total:cpu-seconds", metrics.KindFloat64)
	c0, c1, okc := both("/cpu/classes/total:cpu-seconds", metrics.KindFloat64)
	if okg && okc {
		if cpu := c1.Float64() - c0.Float64(); cpu > 0 {
			fmt.Fprintf(&out, "master-gc-cpu-share %g\n", (g1.Float64()-g0.Float64())/cpu)
		}
	}
	if v, ok := sample(b, "/gc/heap/live:bytes"); ok && v.Kind() == metrics.KindUint64 {
		fmt.Fprintf(&out, "master-heap-live-mib %g\n", float64(v.Uint64())/(1<<20))
	}
	if os.WriteFile(file+".tmp", []byte(out.String()), 0o644) == nil {
		_ = os.Rename(file+".tmp", file)
	}
}

// fleetTraceFile is where a process of the fleet benchmark writes its
// runtime trace of the measured part ("" without WILLOW_FLEET_TRACE):
// PREFIX.master for the master, PREFIX.sim for the simulated fleet.
func fleetTraceFile(side string) string {
	if p := os.Getenv("WILLOW_FLEET_TRACE"); p != "" {
		return p + "." + side
	}
	return ""
}

// startTrace starts a runtime trace to file+".tmp" (nil if it cannot).
func startTrace(file string) *os.File {
	f, err := os.Create(file + ".tmp")
	if err != nil {
		return nil
	}
	if trace.Start(f) != nil {
		f.Close()
		return nil
	}
	return f
}

// stopTrace ends the trace started by startTrace and renames it to file.
func stopTrace(f *os.File, file string) {
	trace.Stop()
	if f.Close() == nil {
		_ = os.Rename(file+".tmp", file)
	}
}

// writeProfile writes the named runtime profile to file (whole, by rename).
func writeProfile(file, name string, debug int) {
	f, err := os.Create(file + ".tmp")
	if err != nil {
		return
	}
	err = pprof.Lookup(name).WriteTo(f, debug)
	if f.Close() == nil && err == nil {
		_ = os.Rename(file+".tmp", file)
	}
}

// fleetRoute is the j-th Route call of a round: a role and region in
// turn, every other call the SDK's (client.Router's Call and
// CallSession: the few least loaded endpoints a list), the others for
// every endpoint, as an edge finding its peers asks.
func fleetRoute(j int) (req *willowv1.RouteRequest, full bool) {
	roles, regions := []string{"upload", "upload", "edgecache", "edgecache", "compress"}, []string{"a", "b", "c"}
	req = &willowv1.RouteRequest{Role: roles[(j/2)%len(roles)], Region: regions[(j/2)%len(regions)]}
	if full = j%2 == 1; !full {
		req.MaxPerList = client.DefaultCallPerList
	}
	return req, full
}

// fleetCallerConns is how many connections the Route caller spreads its
// calls over (callers are many machines, each with its own).
const fleetCallerConns = 10

// fleetCaller is the benchmark's Route caller, a process of its own as a
// client is a machine of its own (in the simulator's process a Route
// answer waited behind the wake-ups of the fleet's 15 000 goroutines
// before its caller ran). It dials addr as the SDK does (node.Dial), and
// for each line "round" on stdin makes fleetRoutes calls (fleetRoute),
// one every 10 ms, each on its own, printing "R FULL NS" for each (FULL
// 1 for an answer with every endpoint), "E FULL NS ERROR" for a failed
// one, then "END".
func fleetCaller(addr string) int {
	var mcs []willowv1.MasterClient
	var creds []grpc.CallOption
	for k := range fleetCallerConns {
		c, err := node.Dial(addr, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mcs = append(mcs, willowv1.NewMasterClient(c))
		creds = append(creds, grpc.PerRPCCredentials(auth.NodeCredentials{Secret: fleetSecret,
			ID: fmt.Sprintf("fleet-caller-%d", k), Role: "upload", Instance: auth.NewInstance()}))
	}
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for j := range fleetRoutes {
			req, full := fleetRoute(j)
			k := j % fleetCallerConns
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				rs := time.Now()
				_, err := mcs[k].Route(ctx, req, creds[k])
				d := time.Since(rs)
				f := 0
				if full {
					f = 1
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					fmt.Fprintf(out, "E %d %d %s/%s max_per_list %d: %s\n", f, d, req.GetRole(), req.GetRegion(), req.GetMaxPerList(),
						strings.ReplaceAll(err.Error(), "\n", " "))
				} else {
					fmt.Fprintf(out, "R %d %d\n", f, d)
				}
			}()
			time.Sleep(time.Second / fleetRoutes)
		}
		wg.Wait()
		fmt.Fprintln(out, "END")
		if out.Flush() != nil {
			return 1
		}
	}
	return 0
}

func redisClient(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// procStat is a process's CPU time (user + system) and RSS from /proc.
func procStat(pid int) (cpu time.Duration, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	// Fields after the command: state is f[0]; utime f[11], stime f[12].
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	cpu = time.Duration(ut+st) * time.Second / hz
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	return cpu, rss, nil
}

// runqueueWait is how long pid's threads have waited for a CPU while
// runnable (the second field of each thread's schedstat): a process the
// box's other work starves waits there, one that has nothing to do does
// not.
func runqueueWait(pid int) time.Duration {
	tids, _ := threads(pid)
	var wait int64
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if f := strings.Fields(string(b)); err == nil && len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			wait += ns
		}
	}
	return time.Duration(wait)
}

// loadAvg is the box's 1-minute load average (the benchmark reports it:
// the box may be shared).
func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// simNode is one simulated node: it registered, heartbeats at 1 Hz with
// load figures, and holds a Watch stream.
type simNode struct {
	info    *willowv1.NodeInfo
	creds   grpc.CallOption
	mc      willowv1.MasterClient
	busy    atomic.Bool                // a heartbeat in flight
	hb      *willowv1.HeartbeatRequest // reused by its heartbeats, one at a time
	rnd     *rand.Rand                 // its heartbeats' load figures
	flexVer atomic.Int64               // the flex version its Watch stream last brought
	// Its heartbeats as a node sends them (node.Heartbeater: one stream
	// with sparse answers); unused with WILLOW_FLEET_UNARY=1 (unary
	// Heartbeat calls, as older nodes).
	beater *node.Heartbeater
}

// heartbeat sends sn's heartbeat within timeout: as a node does unless
// unary (then one unary call, as older nodes). It returns the answer to
// a unary call or to a stream's first heartbeat, and nil for the later
// ones on a stream (sparse answers: those that come go to the
// Heartbeater's apply).
func (sn *simNode) heartbeat(ctx context.Context, unary bool, timeout time.Duration) (*willowv1.HeartbeatResponse, error) {
	sn.hb.FlexVersion = sn.flexVer.Load()
	if unary {
		hctx, hcancel := context.WithTimeout(ctx, timeout)
		defer hcancel()
		return sn.mc.Heartbeat(hctx, sn.hb, sn.creds)
	}
	return sn.beater.Beat(ctx, sn.hb, timeout)
}

// fleetSlot is the simulated fleet's heartbeat scheduling step: each node
// heartbeats once a second in one of the second's slots.
const fleetSlot = 10 * time.Millisecond

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p+0.5) - 1 // nearest rank
	return s[min(max(i, 0), len(s)-1)]
}

// fileMissing reports whether a wanted file (name != "") is not there yet.
func fileMissing(name string) bool {
	if name == "" || name == ".goroutines" {
		return false
	}
	_, err := os.Stat(name)
	return err != nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkFleet runs one master (a child process) on a real redis-server
// against N simulated nodes in this process — each registers, heartbeats
// every second with load figures and holds a Watch stream, with its own
// node credential — and reports the master's CPU per heartbeat and RSS,
// Route latency (the SDK's calls, capped at client.DefaultCallPerList
// endpoints a list, and calls for every endpoint, apart), and how long a
// flex change takes to reach every watcher.
// One iteration is one flex change (and fleetRoutes Route calls), at least
// fleetChanges of them: run it with -benchtime 1x (make bench-fleet), as
// the testing package runs a benchmark once with b.N = 1 before any
// larger b.N, and every run starts a fleet of its own.
func BenchmarkFleet(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchFleet(b, n) })
	}
}

// fleetChanges is the least number of flex changes one run measures;
// fleetRoutes the Route calls after each, spread over a second (100, so
// that a run's p99 is not its largest sample).
const (
	fleetChanges = 5
	fleetRoutes  = 100
)

func benchFleet(b *testing.B, n int) {
	// The simulator's garbage collector runs a quarter as often (its heap
	// is mostly the fleet's connections and streams, which live for the
	// whole run): its cycles are the simulated machines' cost, not the
	// master's, and took the box's cores from the master at N = 5000.
	// The master (the child process) keeps the default.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	rd := testenv.StartRedis(b)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	runtimeFile := b.TempDir() + "/master-runtime"
	cmd.Env = append(os.Environ(), fleetRedisEnv+"="+rd.URL, fleetRuntimeEnv+"="+runtimeFile)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		b.Fatalf("fleet master: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	pid := cmd.Process.Pid

	// The Route caller, a process of its own (fleetCaller), unless
	// WILLOW_FLEET_INPROC_ROUTES=1: then the simulated nodes call Route
	// on the fleet's connections, in this process, as until session 9.
	inproc := os.Getenv("WILLOW_FLEET_INPROC_ROUTES") == "1"
	var callerIn io.Writer
	var callerOut *bufio.Scanner
	if !inproc {
		cc := exec.Command(os.Args[0], "-test.run=^$")
		cc.Env = append(os.Environ(), fleetCallerEnv+"="+addr)
		cc.Stderr = os.Stderr
		cc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		w, err := cc.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		r, err := cc.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cc.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Process.Kill(); _ = cc.Wait() })
		callerIn, callerOut = w, bufio.NewScanner(r)
	}

	// Diagnostic configurations (fleetNice): the simulated fleet (this
	// process, from here on) and, apart, Redis at a lower CPU priority,
	// as if they were not on the master's box. Set after the master and
	// the caller started, so they keep the default priority.
	simNice, redisNice := fleetNice(b, fleetSimNiceEnv), fleetNice(b, fleetRedisNiceEnv)
	if simNice != 0 {
		reniceTasks(b, os.Getpid(), simNice)
	}
	if redisNice != 0 {
		reniceTasks(b, rd.Pid(), redisNice)
	}

	// The nodes' gRPC addresses answer the master's health probes: one
	// health server on many listeners, one listener per node, so the
	// master keeps one probe connection per node as with a real fleet.
	hs := grpc.NewServer(grpc.ReadBufferSize(4<<10), grpc.WriteBufferSize(4<<10))
	healthpb.RegisterHealthServer(hs, health.NewServer())
	b.Cleanup(hs.Stop)
	nodeAddrs := make([]string, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatalf("listener %d of %d: %v", i, n, err)
		}
		nodeAddrs[i] = l.Addr().String()
		go hs.Serve(l)
	}

	// Simulated nodes share client connections (50 nodes a connection),
	// each call carrying the node's own credential.
	conns := make([]*grpc.ClientConn, (n+49)/50)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithReadBufferSize(16<<10), grpc.WithWriteBufferSize(16<<10))
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
		b.Cleanup(func() { c.Close() })
	}
	roles := []string{"upload", "upload", "edgecache", "edgecache", "compress"}
	regions := []string{"a", "b", "c"}
	nodes := make([]*simNode, n)
	for i := range n {
		role := roles[i%len(roles)]
		id := fmt.Sprintf("sim-%s-%05d", role, i)
		nodes[i] = &simNode{
			info: &willowv1.NodeInfo{Id: id, Role: role, Region: regions[i%len(regions)], Addr: nodeAddrs[i], Capacity: 8},
			creds: grpc.PerRPCCredentials(auth.NodeCredentials{Secret: fleetSecret, ID: id, Role: role,
				Instance: auth.NewInstance()}),
			mc: willowv1.NewMasterClient(conns[i%len(conns)]),
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	// Register, 32 at a time.
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var regErr atomic.Value
	for _, sn := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			if _, err := sn.mc.Register(rctx, &willowv1.RegisterRequest{Node: sn.info}, sn.creds); err != nil {
				regErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := regErr.Load().(error); err != nil {
		b.Fatalf("register: %v", err)
	}

	// Heartbeats: each node every second, from a random phase, with load
	// figures that move. The simulated fleet stands for N machines, so its
	// side must cost this one box little, or the box's two cores go to the
	// simulator and the master is measured starved (session 5: 5000
	// heartbeat goroutines with a ticker each, their stacks scanned by
	// every GC cycle). One scheduler wakes every fleetSlot and starts a
	// short-lived goroutine for each node due in that slot; a node whose
	// last heartbeat is still in flight skips its turn, as a real node's
	// heartbeat loop (one call at a time, a ticker that drops ticks) does.
	// Each node reuses its own request and load (only its own heartbeat,
	// one at a time, uses them).
	unary := os.Getenv("WILLOW_FLEET_UNARY") == "1"
	var hbOK, hbErr, hbStarted, hbSkipped atomic.Int64
	var measuring atomic.Bool
	var hbMu sync.Mutex
	var hbLat []time.Duration // heartbeat latency while measuring
	var lastHbErr atomic.Value
	var hbAnswers atomic.Int64 // answers after a stream's first (sparse answers)
	answered := func(sn *simNode) func(*willowv1.HeartbeatResponse) {
		return func(resp *willowv1.HeartbeatResponse) {
			hbAnswers.Add(1)
			if resp.GetReregister() && ctx.Err() == nil {
				_, _ = sn.mc.Register(ctx, &willowv1.RegisterRequest{Node: sn.info}, sn.creds)
			}
		}
	}
	beat := func(sn *simNode) {
		defer sn.busy.Store(false)
		r := sn.rnd
		req := r.Int64N(2000)
		l := sn.hb.Load
		l.Cpu, l.InFlight, l.QueueMs = 0.2+1.5*r.Float64(), int32(r.IntN(40)), 20*r.Float64()
		l.Requests, l.Errors, l.SuccessRate, l.RssBytes = req, req/500, 0.998, 200<<20+r.Int64N(100<<20)
		l.NetBytesIn, l.NetBytesOut = r.Int64N(1<<40), r.Int64N(1<<40)
		l.Gauges["pool1_bytes"] = float64(r.IntN(1 << 30))
		hs := time.Now()
		resp, err := sn.heartbeat(ctx, unary, 2*time.Second)
		if measuring.Load() {
			d := time.Since(hs)
			hbMu.Lock()
			hbLat = append(hbLat, d)
			hbMu.Unlock()
		}
		switch {
		case ctx.Err() != nil:
		case err != nil:
			hbErr.Add(1)
			lastHbErr.Store(err)
		default:
			hbOK.Add(1)
			if resp.GetReregister() {
				_, _ = sn.mc.Register(ctx, &willowv1.RegisterRequest{Node: sn.info}, sn.creds)
			}
		}
	}
	slots := make([][]*simNode, time.Second/fleetSlot)
	for i, sn := range nodes {
		sn.rnd = rand.New(rand.NewPCG(uint64(i), 7))
		sn.hb = &willowv1.HeartbeatRequest{Node: sn.info, Load: &willowv1.Load{Gauges: map[string]float64{}}}
		sn.beater = node.NewHeartbeater(sn.mc, answered(sn), sn.creds)
		k := sn.rnd.IntN(len(slots))
		slots[k] = append(slots[k], sn)
	}
	go func() {
		// A late wake (the box is busy) starts every slot it passed, so
		// the fleet offers N heartbeats a second whatever the delay.
		t := time.NewTicker(fleetSlot)
		defer t.Stop()
		next, k := time.Now(), 0
		for {
			for now := time.Now(); !next.After(now); next, k = next.Add(fleetSlot), (k+1)%len(slots) {
				for _, sn := range slots[k] {
					if !sn.busy.CompareAndSwap(false, true) {
						hbSkipped.Add(1)
						continue
					}
					hbStarted.Add(1)
					go beat(sn)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	// Watch streams: each records when it first sees a version.
	var seenMu sync.Mutex
	seen := map[int64][]time.Time{} // flex version -> arrival times
	var watching sync.WaitGroup
	for _, sn := range nodes {
		watching.Add(1)
		go func() {
			first := true
			for ctx.Err() == nil {
				// zstd, as node.watchLoop asks for it.
				st, err := sn.mc.Watch(ctx, &willowv1.WatchRequest{NodeId: sn.info.GetId()}, sn.creds,
					grpc.UseCompressor(node.Zstd))
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for {
					ev, err := st.Recv()
					if err != nil {
						break
					}
					at := time.Now()
					if first {
						first = false
						watching.Done()
					}
					seenMu.Lock()
					v := ev.GetFlex().GetVersion()
					sn.flexVer.Store(v)
					seen[v] = append(seen[v], at)
					seenMu.Unlock()
				}
			}
		}()
	}
	watching.Wait()
	// Every node heartbeating and the master's caches warm, its prober's
	// connections too: the leader probes DefaultProbeBudget healthy nodes a
	// second, taking turns, and dials each node the first time (at N = 5000
	// that was 5 % of the master's CPU in the measured window until
	// session 7: a start-up cost, not the fleet's steady state).
	time.Sleep(max(3*time.Second, time.Duration(n/master.DefaultProbeBudget+2)*time.Second))

	oncall := grpc.PerRPCCredentials(auth.Bearer(fleetOncall))
	mc := willowv1.NewMasterClient(conns[0])
	wait0, simWait0 := runqueueWait(pid), runqueueWait(os.Getpid())
	cpu0, _, err := procStat(pid)
	if err != nil {
		b.Fatal(err)
	}
	sim0, _, err := procStat(os.Getpid()) // the simulated fleet's own CPU (this process)
	if err != nil {
		b.Fatal(err)
	}
	if simNice != 0 {
		// Threads the runtime started since inherit the priority of the
		// thread that made them; this catches any that did not.
		reniceTasks(b, os.Getpid(), simNice)
	}
	load0 := loadAvg()
	hb0, hbErr0, started0, skipped0, answers0, t0 := hbOK.Load(), hbErr.Load(), hbStarted.Load(), hbSkipped.Load(), hbAnswers.Load(), time.Now()
	measuring.Store(true)
	var prop, worst, route, routeFull []time.Duration
	missed, routeFailed := 0, 0
	// The master's profiles of the measured part (fleetMaster).
	profile, heapProfile := os.Getenv("WILLOW_FLEET_CPUPROFILE"), os.Getenv("WILLOW_FLEET_HEAPPROFILE")
	masterTrace := fleetTraceFile("master")
	var simTrace *os.File
	if t := fleetTraceFile("sim"); t != "" {
		simTrace = startTrace(t)
	}
	var stopOnce sync.Once
	stopProfile := func() {
		stopOnce.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGUSR2)
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if fileMissing(profile) || fileMissing(heapProfile) || fileMissing(heapProfile+".goroutines") || fileMissing(masterTrace) || fileMissing(runtimeFile) {
					continue
				}
				return
			}
		})
	}
	for _, f := range []string{profile, heapProfile, heapProfile + ".goroutines", masterTrace, runtimeFile} {
		if f != "" && f != ".goroutines" {
			_ = os.Remove(f)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGUSR1)
	b.Cleanup(stopProfile) // before the master is killed, also when the run fails
	b.ResetTimer()
	for i := 0; i < max(b.N, fleetChanges); i++ {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		resp, err := mc.SetFlex(sctx, &willowv1.SetFlexRequest{Token: fleetOncall, Reason: "fleet benchmark",
			Knobs: map[string]string{"image_quality": strconv.Itoa(60 + i%30)}}, oncall)
		scancel()
		if err != nil {
			b.Fatalf("SetFlex: %v", err)
		}
		v := resp.GetFlex().GetVersion()
		deadline := time.Now().Add(60 * time.Second)
		for {
			seenMu.Lock()
			got := len(seen[v])
			seenMu.Unlock()
			if got >= n {
				break
			}
			if time.Now().After(deadline) {
				missed += n - got
				b.Logf("flex version %d reached %d of %d watchers in 60 s", v, got, n)
				break
			}
			time.Sleep(time.Millisecond)
		}
		seenMu.Lock()
		var w time.Duration
		for _, at := range seen[v] {
			prop = append(prop, at.Sub(start))
			w = max(w, at.Sub(start))
		}
		seenMu.Unlock()
		worst = append(worst, w)
		// Route calls, one every 10 ms over a second, each on its own (a
		// slow answer does not delay the next call, as with many
		// independent callers): every other one the SDK's (route-p99-ms),
		// the others for every endpoint (route-full-p99-ms) (fleetRoute).
		// From the caller's process, or the simulated nodes.
		if !inproc {
			if _, err := io.WriteString(callerIn, "round\n"); err != nil {
				b.Fatalf("Route caller: %v", err)
			}
			for callerOut.Scan() && callerOut.Text() != "END" {
				var kind string
				var f int
				var d time.Duration
				if _, err := fmt.Sscan(callerOut.Text(), &kind, &f, &d); err != nil {
					b.Fatalf("Route caller: %q: %v", callerOut.Text(), err)
				}
				if f == 1 {
					routeFull = append(routeFull, d)
				} else {
					route = append(route, d)
				}
				if kind == "E" {
					routeFailed++
					b.Logf("Route: %s", callerOut.Text())
				}
			}
			if err := callerOut.Err(); err != nil {
				b.Fatalf("Route caller: %v", err)
			}
			continue
		}
		var routing sync.WaitGroup
		var routeMu sync.Mutex
		for j := range fleetRoutes {
			sn := nodes[(i*fleetRoutes+j)%n]
			req, full := fleetRoute(j)
			routing.Add(1)
			go func() {
				defer routing.Done()
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				defer rcancel()
				defer trace.StartRegion(rctx, "route").End()
				rs := time.Now()
				_, err := sn.mc.Route(rctx, req, sn.creds)
				d := time.Since(rs)
				routeMu.Lock()
				defer routeMu.Unlock()
				if full {
					routeFull = append(routeFull, d)
				} else {
					route = append(route, d)
				}
				if err != nil { // counted (route-failed) and logged: the run goes on to show the rest
					routeFailed++
					b.Logf("Route %s/%s (max_per_list %d): %v after %v", req.GetRole(), req.GetRegion(), req.GetMaxPerList(), err, d)
				}
			}()
			time.Sleep(time.Second / fleetRoutes)
		}
		routing.Wait()
	}
	b.StopTimer()
	if simTrace != nil {
		stopTrace(simTrace, fleetTraceFile("sim"))
	}
	stopProfile()
	wait1, simWait1 := runqueueWait(pid), runqueueWait(os.Getpid())
	cpu1, rss, err := procStat(pid)
	if err != nil {
		b.Fatal(err)
	}
	sim1, _, err := procStat(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	hbs := hbOK.Load() - hb0
	elapsed := time.Since(t0)
	if e := hbErr.Load(); e > 0 {
		b.Logf("N=%d: %d heartbeats failed (last: %v)", n, e, lastHbErr.Load())
	}
	if hbs == 0 {
		b.Fatal("no heartbeat succeeded while measuring")
	}
	b.ReportMetric(ms(pct(prop, 0.5)), "propagation-p50-ms")
	b.ReportMetric(ms(pct(prop, 0.99)), "propagation-p99-ms")
	b.ReportMetric(ms(pct(worst, 1)), "propagation-max-ms")
	hbMu.Lock()
	// A heartbeat's time in the simulated node: to its answer when it
	// waits for one (unary, a stream's first), else (sparse answers) to
	// its send.
	b.ReportMetric(ms(pct(hbLat, 0.99)), "heartbeat-p99-ms")
	hbMu.Unlock()
	b.ReportMetric(ms(pct(route, 0.5)), "route-p50-ms")
	b.ReportMetric(ms(pct(route, 0.99)), "route-p99-ms")
	b.ReportMetric(ms(pct(routeFull, 0.5)), "route-full-p50-ms")
	b.ReportMetric(ms(pct(routeFull, 0.99)), "route-full-p99-ms")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(hbs), "cpu-per-heartbeat-us")
	b.ReportMetric(float64(cpu1-cpu0)/float64(elapsed), "master-cores")
	b.ReportMetric(float64(sim1-sim0)/float64(elapsed), "fleet-sim-cores")
	// Threads waiting for a CPU while runnable, on average: above zero,
	// the box (not the process's own work) held it back.
	b.ReportMetric(float64(wait1-wait0)/float64(elapsed), "master-runqueue-wait")
	b.ReportMetric(float64(simWait1-simWait0)/float64(elapsed), "fleet-sim-runqueue-wait")
	b.ReportMetric(float64(simNice), "fleet-sim-nice")
	b.ReportMetric(float64(redisNice), "redis-nice")
	b.ReportMetric((load0+loadAvg())/2, "box-load-avg")
	b.ReportMetric(float64(hbs)/elapsed.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(rss)/(1<<20), "rss-mib")
	b.ReportMetric(float64(hbErr.Load()-hbErr0)/elapsed.Seconds(), "heartbeats-failed/s")
	b.ReportMetric(float64(hbStarted.Load()-started0)/elapsed.Seconds(), "heartbeats-offered/s")
	b.ReportMetric(float64(hbSkipped.Load()-skipped0)/elapsed.Seconds(), "heartbeats-skipped/s")
	// The answers the master sent for the heartbeats after a stream's
	// first (sparse answers: reregister, drills, a flex version the node
	// did not have yet).
	b.ReportMetric(float64(hbAnswers.Load()-answers0)/elapsed.Seconds(), "heartbeat-answers/s")
	b.ReportMetric(float64(missed), "watchers-missed")
	b.ReportMetric(float64(routeFailed), "route-failed")
	// The master's runtime figures of the measured part (writeRuntime).
	if rt, err := os.ReadFile(runtimeFile); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(rt)), "\n") {
			var name string
			var v float64
			if _, err := fmt.Sscan(l, &name, &v); err == nil {
				b.ReportMetric(v, name)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	cancel()
}

// TestWriteRuntimeByName: writeRuntime finds each metric by its name, so
// the same samples in another order (and with an unknown one among
// them) write the same figures.
func TestWriteRuntimeByName(t *testing.T) {
	dir := t.TempDir()
	a := readRuntime()
	runtime.GC()
	b := readRuntime()
	write := func(name string, a, b []metrics.Sample) string {
		f := filepath.Join(dir, name)
		writeRuntime(f, a, b)
		out, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	want := write("in-order", a, b)
	for _, n := range []string{"master-sched-p99-us", "master-gc-cycles", "master-heap-live-mib", "master-goroutines"} {
		if !strings.Contains(want, n+" ") {
			t.Errorf("no %s in\n%s", n, want)
		}
	}
	rev := func(s []metrics.Sample) []metrics.Sample {
		r := []metrics.Sample{{Name: "/no/such:metric"}}
		metrics.Read(r)
		for i := len(s) - 1; i >= 0; i-- {
			r = append(r, s[i])
		}
		return r
	}
	if got := write("reversed", rev(a), rev(b)); got != want {
		t.Errorf("reversed samples wrote\n%s\nwant\n%s", got, want)
	}
}

// fleetSimNiceEnv and fleetRedisNiceEnv select a diagnostic
// configuration of BenchmarkFleet: the nice value (1-19) the simulated
// fleet (the benchmark process: its nodes, watchers and health servers)
// or, apart, the Redis server runs at, so that the master and the Route
// caller get a core first when the box is short of them. It models a
// deployment where the fleet and Redis are not on the master's box; it
// does not replace the default figures (unset: every process at the
// priority the benchmark started with). The runs report the values as
// fleet-sim-nice and redis-nice.
const (
	fleetSimNiceEnv   = "WILLOW_FLEET_SIM_NICE"
	fleetRedisNiceEnv = "WILLOW_FLEET_REDIS_NICE"
)

// fleetNice reads a nice value from env: 0 when unset; a value outside
// 1-19 fails the benchmark.
func fleetNice(b *testing.B, env string) int {
	v := os.Getenv(env)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 19 {
		b.Fatalf("%s=%q: want a nice value 1-19", env, v)
	}
	return n
}

// reniceTasks sets the nice value of every thread of process pid (on
// Linux a nice value is a thread's: setpriority on the process ID alone
// would move only its first thread).
func reniceTasks(b *testing.B, pid, nice int) {
	tids, err := threads(pid)
	if err != nil {
		b.Fatal(err)
	}
	for _, tid := range tids {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			b.Fatalf("renice thread %d of %d to %d: %v", tid, pid, nice, err)
		}
	}
}

// threads lists the thread IDs of process pid (/proc/pid/task).
func threads(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, err
}
