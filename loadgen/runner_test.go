package loadgen_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"willow/client"
	"willow/loadgen"
	willowv1 "willow/proto/willow/v1"
)

// slowDriver is a fake cluster whose uploads answer after upDelay and
// downloads after downDelay, unless their context ends first.
type slowDriver struct {
	upDelay, downDelay time.Duration

	started, answered, cancelled atomic.Int64
	mu                           sync.Mutex
	stored                       map[string][]byte
}

func (d *slowDriver) wait(ctx context.Context, delay time.Duration) error {
	d.started.Add(1)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		d.answered.Add(1)
		return nil
	case <-ctx.Done():
		d.cancelled.Add(1)
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (d *slowDriver) Upload(ctx context.Context, r io.ReaderAt, size int64, opts client.UploadOptions) (*client.UploadResult, error) {
	if err := d.wait(ctx, d.upDelay); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	d.mu.Lock()
	d.stored[opts.UploadID] = b
	d.mu.Unlock()
	return &client.UploadResult{ID: opts.UploadID, Bytes: size}, nil
}

func (d *slowDriver) Download(ctx context.Context, id, variant string, w io.Writer) (*willowv1.DataChunk, error) {
	if variant != "raw" {
		if err := d.wait(ctx, d.downDelay); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	b := d.stored[id]
	d.mu.Unlock()
	_, err := w.Write(b)
	return &willowv1.DataChunk{}, err
}

// fakeMaster answers the observer: one upload node whose heartbeat
// counters grow by fixed amounts per heartbeat.
type fakeMaster struct {
	willowv1.MasterClient
	beats atomic.Int64
}

func (m *fakeMaster) GetFlex(context.Context, *willowv1.GetFlexRequest, ...grpc.CallOption) (*willowv1.FlexState, error) {
	return &willowv1.FlexState{Level: "normal", Version: 1}, nil
}

func (m *fakeMaster) SetFlex(_ context.Context, in *willowv1.SetFlexRequest, _ ...grpc.CallOption) (*willowv1.SetFlexResponse, error) {
	return &willowv1.SetFlexResponse{Flex: &willowv1.FlexState{Level: in.GetLevel(), Version: 2}}, nil
}

func (m *fakeMaster) ListNodes(context.Context, *willowv1.ListNodesRequest, ...grpc.CallOption) (*willowv1.ListNodesResponse, error) {
	n := m.beats.Add(1)
	return &willowv1.ListNodesResponse{Nodes: []*willowv1.NodeStatus{{
		Node:  &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Addr: "127.0.0.1:1"},
		State: "healthy", LastHeartbeatUnixMs: 1_000_000 + n*1000,
		Load: &willowv1.Load{Cpu: 0.5, RssBytes: 100 << 20, NetBytesIn: n * 2_000_000, NetBytesOut: n * 100_000,
			DiskBytesWritten: n * 1_000_000, Fsyncs: n * 10},
	}}}, nil
}

func tinyProfile(t *testing.T, seconds int, upRate, downRate float64) *loadgen.Profile {
	t.Helper()
	p, err := loadgen.ParseProfile([]byte(`name: tiny
photo_dir: ../../shared/testdata/photos
phases:
  - {name: steady, duration: ` + strconv.Itoa(seconds) + `s, upload_rate: ` + strconv.FormatFloat(upRate, 'f', -1, 64) +
		`, download_rate: ` + strconv.FormatFloat(downRate, 'f', -1, 64) + `, max_photo_bytes: 800000}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Cancelling a run cancels the requests it has in flight: none of the
// fake's 30-second uploads is left running, Run returns promptly with
// the context's error, and the report counts them as canceled, not failed.
func TestCancelCancelsRequestsInFlight(t *testing.T) {
	drv := &slowDriver{upDelay: 30 * time.Second, downDelay: 30 * time.Second, stored: map[string][]byte{}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	t0 := time.Now()
	rep, err := loadgen.Run(ctx, loadgen.RunConfig{
		Profile: tinyProfile(t, 60, 10, 0),
		Target:  loadgen.Target{Client: drv, Master: &fakeMaster{}},
	})
	took := time.Since(t0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error %v, want context.Canceled", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Run took %s after cancel: requests in flight were not cancelled", took)
	}
	started, cancelled := drv.started.Load(), drv.cancelled.Load()
	if started == 0 || cancelled != started || drv.answered.Load() != 0 {
		t.Fatalf("fake saw %d started, %d cancelled, %d answered; want every started request cancelled", started, cancelled, drv.answered.Load())
	}
	if rep == nil || !rep.Cancelled {
		t.Fatalf("report %+v: want Cancelled", rep)
	}
	if got := rep.Totals.Upload.Canceled; int64(got) != started {
		t.Errorf("report counts %d canceled uploads, want %d", got, started)
	}
	if rep.Totals.Upload.Failed != 0 || rep.Totals.Lost != 0 {
		t.Errorf("cancelled requests counted as failed (%d) or lost (%d)", rep.Totals.Upload.Failed, rep.Totals.Lost)
	}
}

var progressRe = regexp.MustCompile(`up ([0-9.]+)/s ([0-9]+)% p99 (\S+) fl ([0-9]+)`)

// A fake whose uploads take 1.5 s (longer than a second, which the old
// progress line never showed) still shows a completion rate, a p99 of at
// least 1.5 s and the uploads in flight; plain lines come every
// ProgressEvery and fit in 100 columns.
func TestProgressShowsSlowRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 5 s load against a fake")
	}
	drv := &slowDriver{upDelay: 1500 * time.Millisecond, downDelay: 20 * time.Millisecond, stored: map[string][]byte{}}
	var out bytes.Buffer
	rep, err := loadgen.Run(context.Background(), loadgen.RunConfig{
		Profile:  tinyProfile(t, 5, 8, 4),
		Target:   loadgen.Target{Client: drv, Master: &fakeMaster{}},
		Progress: &out, ProgressEvery: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 || len(lines) > 4 {
		t.Fatalf("want a header and a plain line every 2 s of a 5 s run, got %d lines:\n%s", len(lines), out.String())
	}
	var sawRate, sawP99, sawInFlight bool
	for _, l := range lines {
		if n := len([]rune(l)); n > loadgen.ProgressWidth {
			t.Errorf("line is %d columns: %q", n, l)
		}
		if strings.Contains(l, "\r") || strings.Contains(l, "\033") {
			t.Errorf("plain output redraws: %q", l)
		}
		m := progressRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if rate, _ := strconv.ParseFloat(m[1], 64); rate > 0 {
			sawRate = true
		}
		if d, err := time.ParseDuration(m[3]); err == nil && d >= 1500*time.Millisecond && d < 3*time.Second {
			sawP99 = true
		}
		if n, _ := strconv.Atoi(m[4]); n > 0 {
			sawInFlight = true
		}
	}
	if !sawRate || !sawP99 || !sawInFlight {
		t.Errorf("progress never showed completions/s (%v), a p99 >= 1.5 s (%v) or uploads in flight (%v):\n%s", sawRate, sawP99, sawInFlight, out.String())
	}
	if rep.Totals.Upload.Succeeded == 0 || rep.Totals.Lost != 0 {
		t.Errorf("totals %+v", rep.Totals)
	}
	// The heartbeat counters become per-role rates in the report.
	var rated bool
	for _, s := range rep.Seconds {
		if rr, ok := s.Resources["upload"]; ok && rr.Rated {
			rated = true
			if rr.NetInBps != 2_000_000 || rr.DiskWriteBps != 1_000_000 || rr.FsyncsPerS != 10 || rr.RSSBytes != 100<<20 {
				t.Errorf("second %d upload resources %+v", s.T, rr)
			}
		}
	}
	if !rated {
		t.Error("no second has rated upload resources")
	}
}
