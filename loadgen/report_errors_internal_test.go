package loadgen

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A report keeps the first few errors of each second, by arrival second,
// for failed and rejected requests only.
func TestReportKeepsErrorsPerSecond(t *testing.T) {
	prof, err := ParseProfile([]byte("name: p\nphoto_dir: x\nphases:\n  - {name: a, duration: 3s, upload_rate: 1, download_rate: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: RunConfig{Profile: prof}, start: time.Now().Add(-5 * time.Second)}
	run := context.Background()
	add := func(sec int, kind string, err error) {
		o, reason := classify(run, err)
		r.records = append(r.records, record{sec: sec, done: time.Duration(sec+1) * time.Second, kind: kind, outcome: o, reason: reason, err: errLine(o, err)})
	}
	for i := 0; i < 5; i++ {
		add(1, kindDownload, status.Error(codes.Unavailable, "edge gone"))
	}
	add(2, kindUpload, status.Error(codes.ResourceExhausted, "shed"))
	add(2, kindDownload, status.Error(codes.NotFound, "not ready")) // not a failure
	add(2, kindDownload, nil)
	add(0, kindUpload, errors.New("plain"))
	rep := r.report()
	if got := rep.Seconds[1].Errors; len(got) != maxErrorsPerSecond || !strings.Contains(got[0], "download: ") || !strings.Contains(got[0], "edge gone") {
		t.Errorf("second 1 errors = %q, want %d download lines naming the error", got, maxErrorsPerSecond)
	}
	if got := rep.Seconds[2].Errors; len(got) != 1 || !strings.HasPrefix(got[0], "upload: ") {
		t.Errorf("second 2 errors = %q, want only the rejected upload", got)
	}
	if got := rep.Seconds[0].Errors; len(got) != 1 || !strings.Contains(got[0], "plain") {
		t.Errorf("second 0 errors = %q", got)
	}
}
