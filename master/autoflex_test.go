package master_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// startAutoMaster runs a master with an auto-flex policy file and a short
// leader lease.
func startAutoMaster(t *testing.T, rdb redis.UniversalClient, id, policy string) *testMaster {
	t.Helper()
	return startMasterWith(t, rdb, id, master.Config{AutoFlexPolicy: policy,
		LeaseTTL: time.Second, ProbeInterval: 200 * time.Millisecond, RefreshInterval: 100 * time.Millisecond})
}

// queuePolicy writes a policy with one rule: compress queue p99 above 1 s
// for 1 s steps to blue, below 300 ms steps back.
func queuePolicy(t *testing.T) string {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`
rules:
  - {name: cq, signal: compress_queue_p99_ms, above: 1000, below: 300, dwell: 1s, cooldown: 2s, level: blue}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return policy
}

// startQueueNode runs compress-a-1 heartbeating queueMs to m every 100 ms
// until the test ends.
func startQueueNode(t *testing.T, m *testMaster, queueMs func() float64) {
	t.Helper()
	n, err := node.New(node.Config{ID: "compress-a-1", Role: "compress", Region: "a", MasterAddr: m.node.Addr(),
		HeartbeatInterval: 100 * time.Millisecond, Logger: quiet(), QueueMs: queueMs})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, n.Run)
}

func autoSteps(t *testing.T, c willowv1.MasterClient) []*willowv1.AuditEntry {
	t.Helper()
	h, err := c.FlexHistory(ctxT(t), &willowv1.FlexHistoryRequest{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	var out []*willowv1.AuditEntry
	for _, e := range h.GetEntries() {
		if e.GetActor() == master.AutoFlexActor && e.GetAction() == "set" {
			out = append(out, e)
		}
	}
	return out
}

// TestAutoFlexTwoMastersActOnce: two masters share one Redis; a compress
// node heartbeating a long queue makes exactly one of them step to blue;
// when that master stops and the queue is gone, the other steps back once.
func TestAutoFlexTwoMastersActOnce(t *testing.T) {
	rdb := testenv.StartRedisKind(t, "server").Client(t)
	policy := queuePolicy(t)
	m1 := startAutoMaster(t, rdb, "master-1", policy)
	m2 := startAutoMaster(t, rdb, "master-2", policy)
	var queue atomic.Int64
	queue.Store(1800)
	startQueueNode(t, m1, func() float64 { return float64(queue.Load()) })

	if _, err := m2.client.SetFlexAuto(ctxT(t), &willowv1.SetFlexAutoRequest{Token: token, Mode: master.AutoOn, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	regWait(t, 15*time.Second, "auto-flex steps to blue", func() bool {
		st, err := m1.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		return err == nil && st.GetLevel() == "blue"
	})
	time.Sleep(2 * time.Second) // both masters keep seeing the queue
	steps := autoSteps(t, m1.client)
	if len(steps) != 1 || !strings.Contains(steps[0].GetReason(), "compress queue p99 1.8 s > 1 s") {
		t.Fatalf("auto-flex steps %v, want one to blue", steps)
	}
	as, err := m2.client.GetFlexAuto(ctxT(t), &willowv1.GetFlexAutoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if as.GetLeader() != "master-1" && as.GetLeader() != "master-2" {
		t.Fatalf("leader %q", as.GetLeader())
	}
	// The acting master goes away; the queue drains; the other takes over
	// (lease), keeps the mode from Redis and steps down once.
	leader := m1
	if as.GetLeader() == "master-2" {
		leader = m2
	}
	other := m1
	if leader == m1 {
		other = m2
	}
	leader.stop()
	queue.Store(10)
	regWait(t, 20*time.Second, "the other master steps back to normal", func() bool {
		st, err := other.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		return err == nil && st.GetLevel() == "normal"
	})
	time.Sleep(time.Second)
	steps = autoSteps(t, other.client)
	if len(steps) != 2 || !strings.Contains(steps[0].GetReason(), "< 300 ms") {
		t.Fatalf("auto-flex steps %v, want blue then normal", steps)
	}
}

// TestScheduleSurvivesMasterRestart: a change scheduled through one master
// is applied on time by the master that replaces it, once, audited, and
// listed as applied; cancel and validation refuse what they should.
func TestScheduleSurvivesMasterRestart(t *testing.T) {
	rdb := testenv.StartRedisKind(t, "server").Client(t)
	m := startMaster(t, rdb, "master-1")
	at := time.Now().Add(1500 * time.Millisecond)
	sc, err := m.client.ScheduleFlex(ctxT(t), &willowv1.ScheduleFlexRequest{Token: token, Change: &willowv1.ScheduledChange{
		AtUnixMs: at.UnixMilli(), Level: "blue", ForMs: 60_000, Reason: "NYE: arm ahead"}})
	if err != nil {
		t.Fatal(err)
	}
	if sc.GetId() != "s1" || sc.GetState() != master.SchedulePending || sc.GetActor() != "oncall" {
		t.Fatalf("scheduled %v", sc)
	}
	// Validated when scheduled: a bad knob, a time in the past.
	for _, c := range []*willowv1.ScheduledChange{
		{AtUnixMs: at.UnixMilli(), Knobs: map[string]string{"image_quality": "5"}, Reason: "x"},
		{AtUnixMs: time.Now().Add(-time.Minute).UnixMilli(), Level: "blue", Reason: "x"},
		{AtUnixMs: at.UnixMilli(), Level: "blue"},
	} {
		if _, err := m.client.ScheduleFlex(ctxT(t), &willowv1.ScheduleFlexRequest{Token: token, Change: c}); err == nil {
			t.Fatalf("schedule %v accepted", c)
		}
	}
	s2, err := m.client.ScheduleFlex(ctxT(t), &willowv1.ScheduleFlexRequest{Token: token, Change: &willowv1.ScheduledChange{
		AtUnixMs: at.Add(time.Hour).UnixMilli(), Level: "yellow", Reason: "later"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.client.CancelSchedule(ctxT(t), &willowv1.CancelScheduleRequest{Token: token, Id: s2.GetId(), Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.client.CancelSchedule(ctxT(t), &willowv1.CancelScheduleRequest{Token: token, Id: s2.GetId()}); err == nil {
		t.Fatal("cancelled twice")
	}
	m.stop()
	m2 := startMaster(t, rdb, "master-1")
	regWait(t, 15*time.Second, "the restarted master applies s1", func() bool {
		st, err := m2.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		return err == nil && st.GetLevel() == "blue"
	})
	if time.Now().Before(at) {
		t.Fatal("applied early")
	}
	l, err := m2.client.ListSchedules(ctxT(t), &willowv1.ListSchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, x := range l.GetSchedules() {
		states[x.GetId()] = x.GetState()
	}
	if states["s1"] != master.ScheduleApplied || states["s2"] != master.ScheduleCancelled {
		t.Fatalf("schedules %v", l.GetSchedules())
	}
	st, _ := m2.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
	if st.GetExpiresAtUnixMs() == 0 || st.GetActor() != "oncall" || !strings.Contains(st.GetReason(), "scheduled s1: NYE: arm ahead") {
		t.Fatalf("applied state %v", st)
	}
	h, err := m2.client.FlexHistory(ctxT(t), &willowv1.FlexHistoryRequest{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, e := range h.GetEntries() {
		if strings.HasPrefix(e.GetReason(), "scheduled s1: ") && e.GetAction() == "set" {
			applied++
		}
	}
	if applied != 1 {
		t.Fatalf("s1 applied %d times", applied)
	}
}

// TestAutoStateChangesNoWatchEvent: an auto-flex mode change, a dry-run
// proposal and a new schedule change no knob, so the flex version stays
// and a node's Watch stream gets no event; the mode and the proposal
// survive a master restart; the step auto-flex then takes is one new
// version and one event.
func TestAutoStateChangesNoWatchEvent(t *testing.T) {
	rdb := testenv.StartRedisKind(t, "server").Client(t)
	policy := queuePolicy(t)
	// compress heartbeats a long queue to m (a node follows one master).
	compress := func(m *testMaster) { startQueueNode(t, m, func() float64 { return 1800 }) }
	m := startAutoMaster(t, rdb, "master-1", policy)
	compress(m)

	// events collects the versions one Watch stream receives.
	watch := func(c willowv1.MasterClient) <-chan int64 {
		wctx, wcancel := context.WithCancel(context.Background())
		t.Cleanup(wcancel)
		s, err := c.Watch(wctx, &willowv1.WatchRequest{NodeId: "watcher"})
		if err != nil {
			t.Fatal(err)
		}
		out := make(chan int64, 16)
		go func() {
			for {
				ev, err := s.Recv()
				if err != nil {
					close(out)
					return
				}
				out <- ev.GetFlex().GetVersion()
			}
		}()
		return out
	}
	events := watch(m.client)
	first := <-events
	noEvent := func(what string) {
		t.Helper()
		select {
		case v := <-events:
			t.Fatalf("%s: Watch event with version %d (first %d)", what, v, first)
		case <-time.After(300 * time.Millisecond):
		}
		st, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
		if err != nil || st.GetVersion() != first {
			t.Fatalf("%s: flex version %d (%v), want %d", what, st.GetVersion(), err, first)
		}
	}
	if _, err := m.client.SetFlexAuto(ctxT(t), &willowv1.SetFlexAutoRequest{Token: token, Mode: master.AutoDryRun, Reason: "watch first"}); err != nil {
		t.Fatal(err)
	}
	noEvent("mode change")
	regWait(t, 15*time.Second, "a dry-run proposal", func() bool {
		as, err := m.client.GetFlexAuto(ctxT(t), &willowv1.GetFlexAutoRequest{})
		return err == nil && strings.HasPrefix(as.GetProposal(), "auto-flex would set blue: ")
	})
	noEvent("dry-run proposal")
	if _, err := m.client.ScheduleFlex(ctxT(t), &willowv1.ScheduleFlexRequest{Token: token, Change: &willowv1.ScheduledChange{
		AtUnixMs: time.Now().Add(time.Hour).UnixMilli(), Level: "yellow", Reason: "later"}}); err != nil {
		t.Fatal(err)
	}
	noEvent("new schedule")

	// Restart: the mode and the proposal come back from Redis.
	m.stop()
	m = startAutoMaster(t, rdb, "master-1", policy)
	as, err := m.client.GetFlexAuto(ctxT(t), &willowv1.GetFlexAutoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if as.GetMode() != master.AutoDryRun || !strings.HasPrefix(as.GetProposal(), "auto-flex would set blue: ") {
		t.Fatalf("after restart: mode %q proposal %q", as.GetMode(), as.GetProposal())
	}
	events = watch(m.client)
	if v := <-events; v != first {
		t.Fatalf("after restart the version is %d, want %d", v, first)
	}
	noEvent("restart")
	compress(m)
	if _, err := m.client.SetFlexAuto(ctxT(t), &willowv1.SetFlexAutoRequest{Token: token, Mode: master.AutoOn, Reason: "act"}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-events:
		if v != first+1 {
			t.Fatalf("the step's version %d, want %d", v, first+1)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no Watch event for the auto-flex step")
	}
	st, err := m.client.GetFlex(ctxT(t), &willowv1.GetFlexRequest{})
	if err != nil || st.GetLevel() != "blue" || st.GetActor() != master.AutoFlexActor {
		t.Fatalf("after the step: %v %v", st, err)
	}
	select {
	case v := <-events:
		t.Fatalf("a second Watch event (version %d) after one step", v)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestAutoSignalsFromHeartbeats: what compress and upload nodes put in
// their heartbeats reaches the master's signals: compress demand and
// backlog, a front's store writes/s over store_write_budget (200), and
// the forecasts: 2 uploads/s (both fronts) x the seconds per image task at
// the codec in force (heic at normal: 0.9 s on a, 0.6 s on b, weighted by
// slots 2 and 1) over the 3 slots.
func TestAutoSignalsFromHeartbeats(t *testing.T) {
	rdb := testenv.StartRedisKind(t, "server").Client(t)
	m := startMaster(t, rdb, "master-1")
	for _, tc := range []struct {
		id, role string
		fill     func(*willowv1.Load)
	}{
		{"compress-a-1", "compress", func(l *willowv1.Load) {
			l.CompressDemand, l.Backlog, l.CompressWorkers = 2.5, 3, 2
			l.ImageTaskSeconds = map[string]float64{"heic": 0.9, "jpeg": 0.3}
			l.ImageTaskCpuSeconds, l.UsableCpus, l.Host = map[string]float64{"heic": 1.2, "jpeg": 0.2}, 2, "h1"
		}},
		// A second process on the same host: its CPUs are the host's.
		{"compress-a-2", "compress", func(l *willowv1.Load) {
			l.CompressWorkers, l.ImageTaskSeconds = 2, map[string]float64{"heic": 0.9}
			l.ImageTaskCpuSeconds, l.UsableCpus, l.Host = map[string]float64{"heic": 0.8}, 2, "h1"
		}},
		{"compress-b-1", "compress", func(l *willowv1.Load) {
			l.CompressWorkers, l.ImageTaskSeconds = 1, map[string]float64{"heic": 0.6}
			l.ImageTaskCpuSeconds, l.UsableCpus = map[string]float64{"heic": 0.6}, 2 // no host: one of its own
		}},
		{"upload-a-1", "upload", func(l *willowv1.Load) {
			l.StoreWritesPerS, l.Gauges = 0.5, map[string]float64{node.GaugeUploadsPerS: 1.5, node.GaugeUploadsBegunPerS: 1.5}
		}},
		// A front that does not report arrivals: its region's forecast
		// reads its finished uploads.
		{"upload-b-1", "upload", func(l *willowv1.Load) {
			l.StoreWritesPerS, l.Gauges = 50, map[string]float64{node.GaugeUploadsPerS: 0.25, node.GaugeUploadFailuresPerS: 0.25}
		}},
	} {
		n, err := node.New(node.Config{ID: tc.id, Role: tc.role, Region: tc.id[len(tc.id)-3 : len(tc.id)-2], MasterAddr: m.node.Addr(),
			HeartbeatInterval: 100 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		n.AddLoad(tc.fill)
		runUntilCleanup(t, n.Run)
	}
	var sig map[string]float64
	// 20 s: the package's tests run beside others on a loaded box.
	regWait(t, 20*time.Second, "the signals of five nodes", func() bool {
		as, err := m.client.GetFlexAuto(ctxT(t), &willowv1.GetFlexAutoRequest{})
		if s := as.GetSignals(); fmt.Sprint(s) != fmt.Sprint(sig) {
			sig = s
			t.Logf("signals %v (%v)", sig, err) // shown when the wait times out
		}
		return err == nil && sig[master.SignalStoreWriteRatio] == 0.25 && sig[master.SignalCompressDemand] == 2.5 &&
			sig[master.SignalUploadRate] == 2 && sig[master.SignalUploadArrivals] == 1.5 &&
			sig[master.SignalCompressForecast] > 0.2 && sig[master.SignalCompressCPUForecastNormal] > 0.5
	})
	near := func(name string, want float64) bool { return math.Abs(sig[name]-want) < 1e-9 }
	// Slots: (2 x 0.9 + 2 x 0.9 + 1 x 0.6) / 5 = 0.84 s per task; the
	// arrivals 1.5/s x 0.84 s / 5 slots.
	slots := 1.5 * 0.84 / 5
	// CPUs, region a: (2 x 1.2 + 2 x 0.8) / 4 = 1 s per task over the 2
	// CPUs of host h1, counted once: 1.5/s x 1 s / 2 = 0.75. Region b:
	// its front's finished 0.5/s x 0.6 s / 2 = 0.15. The highest.
	if sig[master.SignalCompressBacklog] != 3 || sig[master.SignalUploadRate] != 2 ||
		!near(master.SignalCompressForecast, slots) || !near(master.SignalCompressForecastNormal, slots) ||
		!near(master.SignalCompressCPUForecastNormal, 0.75) {
		t.Fatalf("signals %v, want backlog 3, upload rate 2, forecasts %v, CPU forecast 0.75", sig, slots)
	}
}
