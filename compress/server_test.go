package compress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/compress"
	"willow/internal/testenv"
	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
)

const testKey = "0123456789abcdef0123456789abcdef"

var testID = "s.a.upload-a-1." + testKey

func TestCompressWritesVariants(t *testing.T) {
	e := newEnv(t, compress.Config{})
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(sharedPhotos, "mate_Storm.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Put(ctx, media.RawKey(testKey), bytes.NewReader(raw), int64(len(raw)), "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.cli.Compress(ctx, &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, SourceKey: media.RawKey(testKey)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Variants) != 3 || resp.CpuSeconds <= 0 {
		t.Fatalf("variants %d, cpu %v", len(resp.Variants), resp.CpuSeconds)
	}
	for _, v := range resp.Variants {
		if v.Codec != "heic" || v.Quality != int32(e.node.Knobs().ImageQuality) || v.ContentType != "image/heic" || len(v.Data) != 0 {
			t.Errorf("%s: %s q%d %s inline %d", v.Name, v.Codec, v.Quality, v.ContentType, len(v.Data))
		}
		rc, info, err := e.store.Get(ctx, media.VariantKey(testKey, v.Name))
		if err != nil {
			t.Fatalf("%s not stored: %v", v.Name, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if int64(len(b)) != v.Bytes || info.ContentType != "image/heic" {
			t.Errorf("%s: stored %d bytes %q, response %d", v.Name, len(b), info.ContentType, v.Bytes)
		}
	}
	// return_data: bytes inline, nothing written.
	other := "fedcba9876543210fedcba9876543210"
	resp, err = e.cli.Compress(ctx, &willowv1.CompressRequest{MediaId: "p1.a.upload-a-1." + other, Kind: willowv1.Kind_KIND_IMAGE, Data: jpegOf(t, gradient(400, 300), 90), ReturnData: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range resp.Variants {
		if int64(len(v.Data)) != v.Bytes || v.Bytes == 0 {
			t.Errorf("%s: inline %d bytes, says %d", v.Name, len(v.Data), v.Bytes)
		}
		if _, err := e.store.Stat(ctx, media.VariantKey(other, v.Name)); err == nil {
			t.Errorf("%s written despite return_data", v.Name)
		}
	}
}

// TestKnobSwitch: a flex change switches the next task's codec and quality
// without a restart.
func TestKnobSwitch(t *testing.T) {
	e := newEnv(t, compress.Config{})
	raw := jpegOf(t, gradient(800, 600), 90)
	run := func() *willowv1.Variant {
		resp, err := e.cli.Compress(context.Background(), &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: raw, ReturnData: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Variants[0]
	}
	if v := run(); v.Codec != "heic" || v.ContentType != "image/heic" {
		t.Fatalf("before: %s %s", v.Codec, v.ContentType)
	}
	e.node.ApplyFlex(&willowv1.FlexState{Version: 2, Knobs: map[string]string{"image_codec": "jpeg", "image_quality": "50"}})
	v := run()
	if v.Codec != "jpeg" || v.Quality != 50 || v.ContentType != "image/jpeg" || !bytes.HasPrefix(v.Data, []byte{0xFF, 0xD8}) {
		t.Fatalf("after: %s q%d %s", v.Codec, v.Quality, v.ContentType)
	}
	e.node.ApplyFlex(&willowv1.FlexState{Version: 3, Knobs: map[string]string{"image_codec": "heic", "image_quality": "40"}})
	if v := run(); v.Codec != "heic" || v.Quality != 40 {
		t.Fatalf("back: %s q%d", v.Codec, v.Quality)
	}
}

func TestCompressErrors(t *testing.T) {
	e := newEnv(t, compress.Config{Limits: limits.Limits{MaxImageBytes: 300 << 10}})
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		req    *willowv1.CompressRequest
		code   codes.Code
		reason string
	}{
		{"pixel bomb", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: read(filepath.Join(sharedBad, "bomb.png"))}, codes.InvalidArgument, limits.ReasonPixelBomb},
		{"truncated jpeg", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: read(filepath.Join(sharedBad, "truncated.jpg"))}, codes.InvalidArgument, compress.ReasonCorruptMedia},
		{"not an image", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: []byte("plain text")}, codes.InvalidArgument, compress.ReasonUnsupportedMedia},
		{"too large", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: read(filepath.Join(sharedPhotos, "Dragonfly_by_Bolly.jpg"))}, codes.InvalidArgument, limits.ReasonTooLarge},
		{"source missing", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, SourceKey: media.RawKey(testKey)}, codes.NotFound, compress.ReasonSourceMissing},
		{"corrupt video", &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_VIDEO, Data: []byte("not a video at all")}, codes.InvalidArgument, compress.ReasonCorruptMedia},
		{"bad media id", &willowv1.CompressRequest{MediaId: "nope", Kind: willowv1.Kind_KIND_IMAGE, Data: []byte("x")}, codes.InvalidArgument, rpcstatus.ReasonBadRequest},
		{"no kind", &willowv1.CompressRequest{MediaId: testID, Data: []byte("x")}, codes.InvalidArgument, rpcstatus.ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.cli.Compress(context.Background(), tt.req)
			if status.Code(err) != tt.code || rpcstatus.Reason(err) != tt.reason {
				t.Fatalf("got %s, want %s %s", rpcstatus.Line(err), tt.code, tt.reason)
			}
		})
	}
}

// fakeFFmpeg writes a script that records its pid and a child's pid in
// pidFile, leaves a file in its working directory (the last argument's
// directory) and then hangs, like a wedged transcode.
func fakeFFmpeg(t *testing.T, pidFile string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ffmpeg")
	script := "#!/bin/sh\nfor a; do last=$a; done\n: > \"$(dirname \"$last\")/partial.mp4\"\nsleep 60 &\necho $$ $! > " + pidFile + "\nwait\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func shortClip(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "clip.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFFmpegKilledAtDeadline: a hanging ffmpeg is killed with its whole
// process group at the task deadline, and the task's temp files go.
func TestFFmpegKilledAtDeadline(t *testing.T) {
	tmp := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pids")
	e := newEnv(t, compress.Config{TempDir: tmp, FFmpeg: fakeFFmpeg(t, pidFile), TaskTimeout: 2 * time.Second})
	clip := shortClip(t)
	start := time.Now()
	_, err := e.cli.Compress(context.Background(), &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_VIDEO, Data: clip, ReturnData: true})
	if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != shedding.ReasonOverload || rpcstatus.RetryAfter(err) <= 0 {
		t.Fatalf("got %s, want RESOURCE_EXHAUSTED overload with retry-after", rpcstatus.Line(err))
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("took %v to give up on a 2 s deadline", d)
	}
	pids, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("fake ffmpeg never ran: %v", err)
	}
	for _, f := range strings.Fields(string(pids)) {
		pid, _ := strconv.Atoi(f)
		deadline := time.Now().Add(3 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d (ffmpeg or its child) still alive", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// alive reports whether pid runs (zombies count as dead).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return !(i > 0 && i+2 < len(b) && b[i+2] == 'Z')
}

// TestOverload: one worker, a queue of one; a third task is shed at once
// and a queued task past its deadline is shed too, both with
// RESOURCE_EXHAUSTED overload and a retry-after.
func TestOverload(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	e := newEnv(t, compress.Config{Workers: 1, QueueLen: 1, FFmpeg: fakeFFmpeg(t, pidFile), TaskTimeout: 5 * time.Second})
	clip := shortClip(t)
	video := &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_VIDEO, Data: clip, ReturnData: true}
	busy := make(chan error, 1)
	go func() { _, err := e.cli.Compress(context.Background(), video); busy <- err }()
	waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil }) // the worker is busy

	image := &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: jpegOf(t, gradient(64, 64), 80), ReturnData: true}
	queued := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		_, err := e.cli.Compress(ctx, image)
		queued <- err
	}()
	waitFor(t, func() bool { return e.srv.QueueMs() > 0 }) // it is waiting in the queue

	_, err := e.cli.Compress(context.Background(), image)
	if status.Code(err) != codes.ResourceExhausted || rpcstatus.Reason(err) != shedding.ReasonOverload || rpcstatus.RetryAfter(err) <= 0 {
		t.Fatalf("queue full: got %s", rpcstatus.Line(err))
	}
	// The queued task's deadline passes while the worker is busy: the client
	// sees its own DEADLINE_EXCEEDED or the server's overload, never success.
	if err := <-queued; status.Code(err) != codes.ResourceExhausted && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("queued task: got %s", rpcstatus.Line(err))
	}
	if err := <-busy; status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("hung video: got %s", rpcstatus.Line(err))
	}
	// Worker free again: work is accepted.
	if _, err := e.cli.Compress(context.Background(), image); err != nil {
		t.Fatalf("after overload: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestVideo transcodes a 1080p clip with noise (so x264 needs its bits) at
// both knob bitrates and checks the result with ffprobe.
func TestVideo(t *testing.T) {
	testenv.LookPath(t, "ffprobe")
	src := filepath.Join(t.TempDir(), "src.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=25:duration=4", "-vf", "noise=alls=12:allf=t",
		"-c:v", "libx264", "-preset", "ultrafast", "-crf", "26", "-pix_fmt", "yuv420p", src)
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	e := newEnv(t, compress.Config{TempDir: tmp})
	// Bigger than gRPC's 4 MiB message limit: it goes through the store.
	if err := e.store.Put(context.Background(), media.RawKey(testKey), bytes.NewReader(raw), int64(len(raw)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	for i, kbps := range []int{1800, 1200} {
		t.Run(strconv.Itoa(kbps)+"kbps", func(t *testing.T) {
			e.node.ApplyFlex(&willowv1.FlexState{Version: int64(10 + i), Knobs: map[string]string{"video_bitrate_kbps": strconv.Itoa(kbps)}})
			resp, err := e.cli.Compress(context.Background(), &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_VIDEO, SourceKey: media.RawKey(testKey)})
			if err != nil {
				t.Fatal(rpcstatus.Line(err))
			}
			if len(resp.Variants) != 2 || resp.Variants[0].Name != "video" || resp.Variants[1].Name != "poster" {
				t.Fatalf("variants %v", resp.Variants)
			}
			v, p := resp.Variants[0], resp.Variants[1]
			if v.Width != 1280 || v.Height != 720 || v.Codec != "h264" || v.Quality != int32(kbps) || v.ContentType != "video/mp4" {
				t.Errorf("video %dx%d %s q%d %s", v.Width, v.Height, v.Codec, v.Quality, v.ContentType)
			}
			if p.Width != 1280 || p.Height != 720 || p.ContentType != "image/jpeg" || p.Codec != "jpeg" {
				t.Errorf("poster %dx%d %s", p.Width, p.Height, p.ContentType)
			}
			if resp.CpuSeconds <= 0 {
				t.Errorf("cpu %v", resp.CpuSeconds)
			}
			rc, info, err := e.store.Get(context.Background(), media.VariantKey(testKey, "video"))
			if err != nil || info.ContentType != "video/mp4" || info.Size != v.Bytes {
				t.Fatalf("stored video: %v %+v", err, info)
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			f := filepath.Join(t.TempDir(), "out.mp4")
			os.WriteFile(f, data, 0o644)
			out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
				"stream=codec_name,pix_fmt,width,height,bit_rate:format=duration", "-of", "json", f).Output()
			if err != nil {
				t.Fatal(err)
			}
			var j struct {
				Streams []struct {
					Codec   string `json:"codec_name"`
					PixFmt  string `json:"pix_fmt"`
					BitRate string `json:"bit_rate"`
				} `json:"streams"`
				Format struct {
					Duration string `json:"duration"`
				} `json:"format"`
			}
			if err := json.Unmarshal(out, &j); err != nil || len(j.Streams) != 1 {
				t.Fatalf("ffprobe: %s %v", out, err)
			}
			br, _ := strconv.ParseFloat(j.Streams[0].BitRate, 64)
			dur, _ := strconv.ParseFloat(j.Format.Duration, 64)
			t.Logf("%d kbps target: %.0f kbps, %.2f s, %d bytes, cpu %.2f s", kbps, br/1000, dur, v.Bytes, resp.CpuSeconds)
			if r := br / 1000 / float64(kbps); r < 0.85 || r > 1.15 {
				t.Errorf("bitrate %.0f kbps, target %d (ratio %.2f)", br/1000, kbps, r)
			}
			if dur < 3.9 || dur > 4.1 || j.Streams[0].Codec != "h264" || j.Streams[0].PixFmt != "yuv420p" {
				t.Errorf("duration %.2f codec %s pix %s", dur, j.Streams[0].Codec, j.Streams[0].PixFmt)
			}
			if !bytes.Contains(data[:min(len(data), 64<<10)], []byte("moov")) {
				t.Error("moov not at the front: faststart missing")
			}
		})
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

// TestVideoShippedClips runs the shipped sample videos through Video.
func TestVideoShippedClips(t *testing.T) {
	f, err := os.Open(filepath.Join(sharedVideos, "cube.mpeg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := compress.Video(context.Background(), f, compress.VideoOptions{BitrateKbps: 1200, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Outputs[0]
	if v.Width%2 != 0 || v.Height%2 != 0 || max(v.Width, v.Height) > 1280 || res.OutputSeconds < res.SourceSeconds-0.5 {
		t.Errorf("cube: %dx%d %.2fs of %.2fs", v.Width, v.Height, res.OutputSeconds, res.SourceSeconds)
	}
	t.Logf("cube.mpeg: %dx%d %.1fs %.0f kbps cpu %v", v.Width, v.Height, res.OutputSeconds, res.OutputKbps, res.CPU)
}

// TestStartNow: a task asked with start_now runs when a worker slot is
// free, and is answered not_started at once, run nowhere and queued
// nowhere, while every slot is busy.
func TestStartNow(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	e := newEnv(t, compress.Config{Workers: 1, QueueLen: 4, FFmpeg: fakeFFmpeg(t, pidFile), TaskTimeout: 2 * time.Second})
	image := &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_IMAGE, Data: jpegOf(t, gradient(64, 64), 80),
		ReturnData: true, StartNow: true}
	resp, err := e.cli.Compress(context.Background(), image)
	if err != nil || resp.GetNotStarted() || len(resp.GetVariants()) == 0 {
		t.Fatalf("free worker: not_started %v, %d variants, err %v", resp.GetNotStarted(), len(resp.GetVariants()), err)
	}

	video := &willowv1.CompressRequest{MediaId: testID, Kind: willowv1.Kind_KIND_VIDEO, Data: shortClip(t), ReturnData: true}
	busy := make(chan error, 1)
	go func() { _, err := e.cli.Compress(context.Background(), video); busy <- err }()
	waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil }) // the only worker is busy
	resp, err = e.cli.Compress(context.Background(), image)
	if err != nil || !resp.GetNotStarted() || len(resp.GetVariants()) != 0 {
		t.Fatalf("busy worker: not_started %v, %d variants, err %v", resp.GetNotStarted(), len(resp.GetVariants()), err)
	}
	if q := e.srv.QueueMs(); q != 0 {
		t.Fatalf("a not_started task counts in the queue: %v ms", q)
	}
	<-busy // the hung video is killed at its deadline
	resp, err = e.cli.Compress(context.Background(), image)
	if err != nil || resp.GetNotStarted() || len(resp.GetVariants()) == 0 {
		t.Fatalf("worker free again: not_started %v, %d variants, err %v", resp.GetNotStarted(), len(resp.GetVariants()), err)
	}
}
