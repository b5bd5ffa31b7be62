package loadgen_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/client"
	"willow/loadgen"
	willowv1 "willow/proto/willow/v1"
)

// processingDriver is a fake cluster whose every other upload is
// acknowledged processing (no variants); such an upload's variants
// download only after readyAfter, or never when its ID is in never.
type processingDriver struct {
	readyAfter time.Duration
	mu         sync.Mutex
	n          int
	acked      map[string]time.Time // processing uploads: when acknowledged
	never      map[string]bool
	polls      map[string]int
}

func (d *processingDriver) Upload(ctx context.Context, r io.ReaderAt, size int64, opts client.UploadOptions) (*client.UploadResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	res := &client.UploadResult{ID: opts.UploadID, Bytes: size, Location: "store"}
	switch {
	case d.n%2 == 1:
		res.Variants = []*willowv1.Variant{{Name: "thumb", Bytes: 1}}
	default:
		d.acked[opts.UploadID] = time.Now()
		if d.n == 2 {
			d.never[opts.UploadID] = true
		}
	}
	return res, nil
}

func (d *processingDriver) Download(ctx context.Context, id, variant string, w io.Writer) (*willowv1.DataChunk, error) {
	d.mu.Lock()
	at, processing := d.acked[id]
	never := d.never[id]
	if processing && variant != "raw" {
		d.polls[id]++
	}
	d.mu.Unlock()
	if variant != "raw" && processing && (never || time.Since(at) < d.readyAfter) {
		return nil, status.Error(codes.NotFound, "processing")
	}
	return &willowv1.DataChunk{}, nil
}

// The uploads acknowledged with their variants count as ready at the
// acknowledgement; those acknowledged processing are polled until a
// variant downloads, so their latency is at least the fake's readyAfter;
// one whose variants never come counts as not ready, not as a latency.
func TestVariantReadyLatency(t *testing.T) {
	drv := &processingDriver{readyAfter: 400 * time.Millisecond, acked: map[string]time.Time{}, never: map[string]bool{},
		polls: map[string]int{}}
	rep, err := loadgen.Run(context.Background(), loadgen.RunConfig{
		Profile: tinyProfile(t, 3, 4, 0),
		Target:  loadgen.Target{Client: drv, Master: &fakeMaster{}},
		// The never-ready upload is polled this long after the run.
		VerifyTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Variants
	drv.mu.Lock()
	processing, uploads := len(drv.acked), drv.n
	var polledNever int
	for id := range drv.never {
		polledNever = drv.polls[id]
	}
	drv.mu.Unlock()
	if uploads < 4 || v.Acked != uploads || v.Processing != processing || v.NotReady != 1 {
		t.Fatalf("variant stats %+v; fake saw %d uploads, %d processing, 1 never ready", v, uploads, processing)
	}
	if polledNever < 2 {
		t.Fatalf("the never-ready upload was polled %d times", polledNever)
	}
	// Half the uploads were ready at the ack: p50 is 0 or the smallest
	// polled latency; p99 and max are a polled one, at least readyAfter.
	if v.P99Ms < 400 || v.MaxMs < v.P99Ms {
		t.Fatalf("variant-ready p99 %.0f ms, max %.0f ms: want >= the fake's 400 ms", v.P99Ms, v.MaxMs)
	}
}
