package compress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"willow/flex"
	"willow/limits"
	"willow/media"
)

// VideoOptions steer Video. Zero values mean the documented defaults.
type VideoOptions struct {
	// BitrateKbps is the video stream's target; default
	// flex.DefaultVideoBitrateKbps.
	BitrateKbps int
	// MaxPixels bounds the input frame size; default limits.DefaultMaxPixels.
	MaxPixels int64
	// MaxBytes bounds the input; default limits.DefaultMaxVideoBytes.
	MaxBytes int64
	// MaxDuration bounds the input's duration as ffprobe reads it
	// (ErrTooLong); zero means no limit.
	MaxDuration time.Duration
	// TempDir holds the task's working directory; default os.TempDir().
	TempDir string
	// X264Preset; default DefaultX264Preset.
	X264Preset string
	// FFmpeg and FFprobe binaries; default "ffmpeg" and "ffprobe".
	FFmpeg, FFprobe string
}

func (o VideoOptions) withDefaults() VideoOptions {
	if o.BitrateKbps <= 0 {
		o.BitrateKbps = defaultVideoKbps
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = limits.DefaultMaxPixels
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = limits.DefaultMaxVideoBytes
	}
	if o.X264Preset == "" {
		o.X264Preset = DefaultX264Preset
	}
	if o.FFmpeg == "" {
		o.FFmpeg = "ffmpeg"
	}
	if o.FFprobe == "" {
		o.FFprobe = "ffprobe"
	}
	return o
}

// ErrVerify is returned (wrapped) when the transcoded video fails the
// ffprobe check (duration changed, or bitrate more than 15% over target).
var ErrVerify = errors.New("transcoded video failed verification")

// VideoResult is the outcome of Video.
type VideoResult struct {
	Outputs []Output
	// CPU is the user+system time of the ffmpeg and ffprobe children.
	CPU time.Duration
	// SourceSeconds and OutputSeconds are the probed durations;
	// OutputKbps the probed video stream bitrate.
	SourceSeconds, OutputSeconds float64
	OutputKbps                   float64
}

// Video transcodes the video read from src to the variants video (MP4,
// H.264 High, yuv420p, long edge <= MaxVideoLongEdge with even dimensions,
// +faststart, AAC audio if present) and poster (JPEG of a frame). Its
// working directory under TempDir is removed before it returns; ffmpeg runs
// in its own process group, killed whole when ctx ends. Errors: ErrTooLarge,
// ErrPixelBomb, ErrCorrupt (ffprobe cannot read the input, or ffmpeg fails
// on it), ErrVerify, or ctx.Err() wrapped.
func Video(ctx context.Context, src io.Reader, opt VideoOptions) (VideoResult, error) {
	opt = opt.withDefaults()
	var res VideoResult
	dir, err := os.MkdirTemp(opt.TempDir, "compress-video-*")
	if err != nil {
		return res, fmt.Errorf("video temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	in := filepath.Join(dir, "src")
	if err := copyLimited(in, src, opt.MaxBytes); err != nil {
		return res, err
	}
	sp, err := probe(ctx, opt, in, &res.CPU)
	if err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("probe source: %w", ctx.Err())
		}
		return res, fmt.Errorf("probe source: %v: %w", err, ErrCorrupt)
	}
	if int64(sp.Width)*int64(sp.Height) > opt.MaxPixels {
		return res, fmt.Errorf("video %dx%d: %w", sp.Width, sp.Height, ErrPixelBomb)
	}
	res.SourceSeconds = sp.Duration
	if opt.MaxDuration > 0 && sp.Duration > opt.MaxDuration.Seconds() {
		return res, fmt.Errorf("video %.1fs over %s: %w", sp.Duration, opt.MaxDuration, ErrTooLong)
	}

	out := filepath.Join(dir, "video.mp4")
	kbps := opt.BitrateKbps
	le := strconv.Itoa(MaxVideoLongEdge)
	scale := "scale=w='if(gte(iw,ih),trunc(min(" + le + ",iw)/2)*2,-2)':h='if(gte(iw,ih),-2,trunc(min(" + le + ",ih)/2)*2)'"
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y", "-i", in,
		"-map", "0:v:0", "-map", "0:a:0?", "-sn", "-dn", "-map_metadata", "-1",
		"-vf", scale + ",format=yuv420p",
		"-c:v", "libx264", "-preset", opt.X264Preset, "-profile:v", "high",
		"-b:v", fmt.Sprintf("%dk", kbps), "-maxrate", fmt.Sprintf("%dk", kbps*11/10),
		"-bufsize", fmt.Sprintf("%dk", kbps*2),
		"-c:a", "aac", "-b:a", "96k", "-ac", "2",
		"-movflags", "+faststart", "-f", "mp4", out}
	if err := run(ctx, opt.FFmpeg, args, &res.CPU); err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("ffmpeg: %w", ctx.Err())
		}
		return res, fmt.Errorf("ffmpeg: %v: %w", err, ErrCorrupt)
	}
	op, err := probe(ctx, opt, out, &res.CPU)
	if err != nil {
		return res, fmt.Errorf("probe output: %v: %w", err, ErrVerify)
	}
	res.OutputSeconds, res.OutputKbps = op.Duration, op.Kbps
	// Only a shorter output is a failure: some containers (MPEG-PS) carry a
	// bogus short duration in the header, and a longer output is then right.
	if tol := math.Max(0.5, 0.05*sp.Duration); sp.Duration > 0 && op.Duration < sp.Duration-tol {
		return res, fmt.Errorf("duration %.2fs, source %.2fs: %w", op.Duration, sp.Duration, ErrVerify)
	}
	// Undershoot is allowed (simple content needs fewer bits); overshoot
	// beyond 15% breaks the budget the knob promises.
	if op.Kbps > 1.15*float64(kbps) && op.Duration >= 2 {
		return res, fmt.Errorf("video bitrate %.0f kbps over target %d: %w", op.Kbps, kbps, ErrVerify)
	}
	if op.Width%2 != 0 || op.Height%2 != 0 || max(op.Width, op.Height) > MaxVideoLongEdge {
		return res, fmt.Errorf("video %dx%d: %w", op.Width, op.Height, ErrVerify)
	}

	poster := filepath.Join(dir, "poster.jpg")
	at := math.Min(1, op.Duration/3)
	if err := run(ctx, opt.FFmpeg, []string{"-nostdin", "-hide_banner", "-v", "error", "-y",
		"-ss", strconv.FormatFloat(at, 'f', 3, 64), "-i", out, "-frames:v", "1", "-q:v", "3",
		"-f", "image2", "-c:v", "mjpeg", poster}, &res.CPU); err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("poster: %w", ctx.Err())
		}
		return res, fmt.Errorf("poster: %v: %w", err, ErrVerify)
	}
	vb, err := os.ReadFile(out)
	if err != nil {
		return res, fmt.Errorf("read video: %w", err)
	}
	pb, err := os.ReadFile(poster)
	if err != nil {
		return res, fmt.Errorf("read poster: %w", err)
	}
	pc, err := jpeg.DecodeConfig(bytes.NewReader(pb))
	if err != nil {
		return res, fmt.Errorf("poster: %v: %w", err, ErrVerify)
	}
	res.Outputs = []Output{
		newOutput(media.VariantVideo, CodecH264, kbps, op.Width, op.Height, "video/mp4", vb),
		newOutput(media.VariantPoster, string(flex.CodecJPEG), 0, pc.Width, pc.Height, "image/jpeg", pb),
	}
	return res, nil
}

func copyLimited(path string, r io.Reader, limit int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("video temp file: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write video temp file: %w", err)
	}
	if n > limit {
		return fmt.Errorf("video over %d bytes: %w", limit, ErrTooLarge)
	}
	if n == 0 {
		return fmt.Errorf("empty video: %w", ErrCorrupt)
	}
	return nil
}

type probed struct {
	Width, Height int
	Duration      float64
	Kbps          float64
}

func probe(ctx context.Context, opt VideoOptions, path string, cpu *time.Duration) (probed, error) {
	var out bytes.Buffer
	cmd := command(ctx, opt.FFprobe, "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=width,height,bit_rate:format=duration", "-of", "json", path)
	cmd.Stdout = &out
	err := runCmd(cmd, cpu)
	if err != nil {
		return probed{}, err
	}
	var j struct {
		Streams []struct {
			Width   int    `json:"width"`
			Height  int    `json:"height"`
			BitRate string `json:"bit_rate"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		return probed{}, fmt.Errorf("ffprobe output: %w", err)
	}
	if len(j.Streams) == 0 || j.Streams[0].Width <= 0 || j.Streams[0].Height <= 0 {
		return probed{}, errors.New("no video stream")
	}
	p := probed{Width: j.Streams[0].Width, Height: j.Streams[0].Height}
	p.Duration, _ = strconv.ParseFloat(j.Format.Duration, 64)
	if br, err := strconv.ParseFloat(j.Streams[0].BitRate, 64); err == nil {
		p.Kbps = br / 1000
	}
	return p, nil
}

// command builds a child that runs in its own process group and is killed
// with the whole group when ctx ends.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

func run(ctx context.Context, name string, args []string, cpu *time.Duration) error {
	return runCmd(command(ctx, name, args...), cpu)
}

func runCmd(cmd *exec.Cmd, cpu *time.Duration) error {
	var stderr bytes.Buffer
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	err := cmd.Run()
	if cmd.ProcessState != nil {
		*cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		msg := bytes.TrimSpace(stderr.Bytes())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		return fmt.Errorf("%s: %v: %s", filepath.Base(cmd.Path), err, msg)
	}
	return nil
}
