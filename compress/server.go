package compress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"willow/internal/cpustat"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"willow/flex"
	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/store"
)

// Server is the compress gRPC service: a bounded worker pool in front of
// Images and Video. Create it with New.
type Server struct {
	willowv1.UnimplementedCompressServer

	cfg   Config
	deps  Deps
	log   *slog.Logger
	slots chan struct{} // one token per worker
	dem   *demand       // demand.go
	cost  taskCost      // taskcost.go
	share cpuShare      // taskcost.go
	// waiting counts tasks queued for a slot.
	waiting atomic.Int64
	q       queueStats
	m       metrics
}

var _ willowv1.CompressServer = (*Server)(nil)

type metrics struct {
	tasks     *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	queueWait prometheus.Histogram
	cpu       *prometheus.CounterVec
	outBytes  *prometheus.CounterVec
}

// New validates cfg, applies defaults and registers the service on
// deps.Node's gRPC server and its metrics on the node's registry.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Node == nil || deps.Store == nil {
		return nil, errors.New("compress: Deps.Node and Deps.Store are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers()
	}
	switch {
	case cfg.QueueLen == 0:
		cfg.QueueLen = DefaultQueueLen
	case cfg.QueueLen < 0:
		cfg.QueueLen = 0
	}
	if cfg.TaskTimeout <= 0 {
		cfg.TaskTimeout = DefaultTaskTimeout
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.HEICPreset == "" {
		cfg.HEICPreset = DefaultHEICPreset
	}
	if cfg.X264Preset == "" {
		cfg.X264Preset = DefaultX264Preset
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = deps.Node.Logger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.TempDir, 0o755); err != nil {
		return nil, fmt.Errorf("compress: temp dir: %w", err)
	}
	s := &Server{cfg: cfg, deps: deps, log: cfg.Logger.With("svc", "compress"),
		slots: make(chan struct{}, cfg.Workers)}
	s.q.now = cfg.Now
	s.dem = newDemand(cfg.Now, cfg.Workers)
	s.q.waiters = map[uint64]time.Time{}
	s.m = metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_compress_tasks_total",
			Help: "Compress tasks by kind, codec and result."}, []string{"kind", "codec", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "willow_compress_task_seconds",
			Help: "Wall time of compress tasks after queueing.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"kind"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "willow_compress_queue_seconds",
			Help: "Time tasks waited for a worker.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		cpu: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_compress_cpu_seconds_total",
			Help: "CPU seconds spent by compress tasks (process delta for images, ffmpeg children for video)."}, []string{"kind", "codec"}),
		outBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_compress_output_bytes_total",
			Help: "Bytes of variants produced."}, []string{"variant", "codec"}),
	}
	if !tuneMalloc(os.Getenv) {
		s.log.Warn("could not fix the C allocator's mmap threshold; codec buffers may stay in malloc arenas", "threshold", MallocMmapThreshold)
	}
	reg := deps.Node.Registry()
	for _, c := range append(mallocCollectors(), s.m.tasks, s.m.seconds, s.m.queueWait, s.m.cpu, s.m.outBytes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "willow_compress_queue_length", Help: "Tasks waiting for a worker."},
			func() float64 { return float64(s.waiting.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "willow_compress_busy_workers", Help: "Workers running a task."},
			func() float64 { return float64(len(s.slots)) }),
	) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("compress: register metrics: %w", err)
		}
	}
	s.m.initSeries()
	// Auto-flex signals in every heartbeat.
	host := hostID()
	deps.Node.AddLoad(func(l *willowv1.Load) {
		l.QueueP99Ms = s.q.p99()
		l.CompressDemand = s.dem.value()
		l.CompressWorkers = int32(s.cfg.Workers)
		l.ImageTaskSeconds, l.ImageTaskCpuSeconds = s.cost.snapshot()
		l.UsableCpus, l.Host = float64(runtime.GOMAXPROCS(0)), host
		l.Backlog = s.waiting.Load()
	})
	if err := deps.Node.Guard().Declare(Methods()); err != nil {
		return nil, err
	}
	willowv1.RegisterCompressServer(deps.Node.Server(), s)
	return s, nil
}

// initSeries creates the series of every kind and codec at 0, so the
// counters the docs name read 0 before the first task rather than not
// existing.
func (m *metrics) initSeries() {
	for _, kind := range []willowv1.Kind{willowv1.Kind_KIND_IMAGE, willowv1.Kind_KIND_VIDEO} {
		codecs := []string{string(flex.CodecHEIC), string(flex.CodecJPEG)}
		if kind == willowv1.Kind_KIND_VIDEO {
			codecs = []string{CodecH264}
		}
		m.seconds.WithLabelValues(kindName(kind))
		m.tasks.WithLabelValues(kindName(kind), "", "overload")
		for _, c := range codecs {
			m.cpu.WithLabelValues(kindName(kind), c)
			m.tasks.WithLabelValues(kindName(kind), c, "ok")
		}
	}
	for _, v := range []string{media.VariantThumb, media.VariantMedium} {
		for _, c := range []string{string(flex.CodecHEIC), string(flex.CodecJPEG)} {
			m.outBytes.WithLabelValues(v, c)
		}
	}
}

// Run waits until ctx is done; tasks run on the RPC goroutines, bounded by
// the worker slots. It returns nil.
func (s *Server) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// QueueMs is the mean time, in milliseconds, that tasks which started in
// the last second waited for a worker, counting tasks still waiting at
// their current age. node.Config.QueueMs reports it to the master.
func (s *Server) QueueMs() float64 { return s.q.mean() }

// Compress makes the variants of one media item.
func (s *Server) Compress(ctx context.Context, req *willowv1.CompressRequest) (*willowv1.CompressResponse, error) {
	resp, err := s.compress(ctx, req)
	if err != nil {
		return nil, s.status(err)
	}
	return resp, nil
}

func (s *Server) compress(ctx context.Context, req *willowv1.CompressRequest) (*willowv1.CompressResponse, error) {
	kind := req.GetKind()
	if kind != willowv1.Kind_KIND_IMAGE && kind != willowv1.Kind_KIND_VIDEO {
		return nil, errBadRequest("kind must be KIND_IMAGE or KIND_VIDEO")
	}
	id, err := media.Parse(req.GetMediaId())
	if err != nil {
		return nil, errBadRequest(fmt.Sprintf("media_id: %v", err))
	}
	if len(req.GetData()) == 0 && req.GetSourceKey() == "" {
		return nil, errBadRequest("source_key or data is required")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TaskTimeout)
	defer cancel()

	s.dem.add(1) // waiting or in work until it returns
	defer s.dem.add(-1)
	waited, err := s.acquire(ctx, req.GetStartNow())
	if errors.Is(err, errNotStarted) {
		s.m.tasks.WithLabelValues(kindName(kind), "", "not_started").Inc()
		return &willowv1.CompressResponse{NotStarted: true}, nil
	}
	if err != nil {
		s.m.tasks.WithLabelValues(kindName(kind), "", "overload").Inc()
		return nil, err
	}
	defer func() { <-s.slots }()

	knobs := s.deps.Node.Knobs() // read once: a knob change applies to the next task
	start := s.cfg.Now()
	cpu0 := cpustat.Process()
	var outs []Output
	var cpu time.Duration
	codec := string(knobs.ImageCodec)
	var taskCPU time.Duration
	if kind == willowv1.Kind_KIND_IMAGE {
		done := s.share.start()
		outs, err = s.image(ctx, req, knobs)
		taskCPU = done()
		cpu = cpustat.Process() - cpu0
	} else {
		codec = CodecH264
		var res VideoResult
		res, err = s.video(ctx, req, knobs)
		outs = res.Outputs
		cpu = cpustat.Process() - cpu0 + res.CPU
	}
	s.m.seconds.WithLabelValues(kindName(kind)).Observe(s.cfg.Now().Sub(start).Seconds())
	s.m.cpu.WithLabelValues(kindName(kind), codec).Add(cpu.Seconds())
	if err != nil {
		s.m.tasks.WithLabelValues(kindName(kind), codec, resultOf(err)).Inc()
		return nil, err
	}
	resp := &willowv1.CompressResponse{CpuSeconds: cpu.Seconds(), QueueMs: float64(waited) / float64(time.Millisecond)}
	for _, o := range outs {
		v := &willowv1.Variant{Name: o.Name, Codec: o.Codec, Quality: int32(o.Quality), Width: int32(o.Width),
			Height: int32(o.Height), Bytes: int64(len(o.Data)), Sha256: o.SHA256, ContentType: o.ContentType}
		if req.GetReturnData() {
			v.Data = o.Data
		} else if err := s.put(ctx, media.VariantKey(id.Key, o.Name), o); err != nil {
			s.m.tasks.WithLabelValues(kindName(kind), codec, "store_error").Inc()
			return nil, err
		}
		s.m.outBytes.WithLabelValues(o.Name, o.Codec).Add(float64(len(o.Data)))
		resp.Variants = append(resp.Variants, v)
	}
	if kind == willowv1.Kind_KIND_IMAGE {
		s.cost.observe(codec, s.cfg.Now().Sub(start), taskCPU)
	}
	s.m.tasks.WithLabelValues(kindName(kind), codec, "ok").Inc()
	s.log.DebugContext(ctx, "compressed", "media", req.GetMediaId(), "codec", codec,
		"cpu_s", cpu.Seconds(), "queue_ms", resp.QueueMs)
	return resp, nil
}

// errNotStarted: acquire's caller asked for a slot now and none was free.
var errNotStarted = errors.New("no worker slot free")

// acquire takes a worker slot, queueing at most QueueLen tasks. A full
// queue, or a deadline passing in the queue, is ErrOverload. With now set
// it does not queue: no free slot is errNotStarted, and the task counts in
// no queue figure (its caller queues it when it asks again).
func (s *Server) acquire(ctx context.Context, now bool) (time.Duration, error) {
	select {
	case s.slots <- struct{}{}:
		s.q.observe(0)
		s.m.queueWait.Observe(0)
		return 0, nil
	default:
	}
	if now {
		return 0, errNotStarted
	}
	if s.waiting.Add(1) > int64(s.cfg.QueueLen) {
		s.waiting.Add(-1)
		return 0, fmt.Errorf("queue full (%d waiting): %w", s.cfg.QueueLen, ErrOverload)
	}
	defer s.waiting.Add(-1)
	t0 := s.cfg.Now()
	tok := s.q.enter(t0)
	defer s.q.leave(tok)
	select {
	case s.slots <- struct{}{}:
		w := s.cfg.Now().Sub(t0)
		s.q.observe(w)
		s.m.queueWait.Observe(w.Seconds())
		return w, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("deadline passed in queue after %v: %w", s.cfg.Now().Sub(t0), ErrOverload)
	}
}

func (s *Server) source(ctx context.Context, req *willowv1.CompressRequest, limit int64) (io.ReadCloser, error) {
	if d := req.GetData(); len(d) > 0 {
		if int64(len(d)) > limit {
			return nil, fmt.Errorf("inline data %d bytes over %d: %w", len(d), limit, ErrTooLarge)
		}
		return io.NopCloser(bytes.NewReader(d)), nil
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	info, err := s.deps.Store.Stat(sctx, req.GetSourceKey())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", req.GetSourceKey(), ErrSourceMissing)
		}
		return nil, fmt.Errorf("stat source: %w", err)
	}
	if info.Size > limit {
		return nil, fmt.Errorf("source %d bytes over %d: %w", info.Size, limit, ErrTooLarge)
	}
	// The read is bounded by the task's deadline, not StoreTimeout: big
	// videos stream for longer than one store call.
	rc, _, err := s.deps.Store.Get(ctx, req.GetSourceKey())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", req.GetSourceKey(), ErrSourceMissing)
		}
		return nil, fmt.Errorf("get source: %w", err)
	}
	return rc, nil
}

func (s *Server) image(ctx context.Context, req *willowv1.CompressRequest, k flex.Knobs) ([]Output, error) {
	rc, err := s.source(ctx, req, s.cfg.Limits.MaxImageBytes)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, s.cfg.Limits.MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read source: %w", err)
	}
	if int64(len(data)) > s.cfg.Limits.MaxImageBytes {
		return nil, fmt.Errorf("source over %d bytes: %w", s.cfg.Limits.MaxImageBytes, ErrTooLarge)
	}
	return Images(ctx, data, ImageOptions{Codec: k.ImageCodec, Quality: k.ImageQuality,
		MaxPixels: s.cfg.Limits.MaxPixels, HEICPreset: s.cfg.HEICPreset})
}

func (s *Server) video(ctx context.Context, req *willowv1.CompressRequest, k flex.Knobs) (VideoResult, error) {
	rc, err := s.source(ctx, req, s.cfg.Limits.MaxVideoBytes)
	if err != nil {
		return VideoResult{}, err
	}
	defer rc.Close()
	return Video(ctx, rc, VideoOptions{BitrateKbps: k.VideoBitrateKbps, MaxPixels: s.cfg.Limits.MaxPixels,
		MaxBytes: s.cfg.Limits.MaxVideoBytes, MaxDuration: s.cfg.Limits.VideoDuration(req.GetBusiness()), TempDir: s.cfg.TempDir, X264Preset: s.cfg.X264Preset,
		FFmpeg: s.cfg.FFmpeg, FFprobe: s.cfg.FFprobe})
}

func (s *Server) put(ctx context.Context, key string, o Output) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	if err := s.deps.Store.Put(ctx, key, bytes.NewReader(o.Data), int64(len(o.Data)), o.ContentType); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

type badRequest string

func (e badRequest) Error() string { return string(e) }

func errBadRequest(msg string) error { return badRequest(msg) }

// status turns a pipeline error into the gRPC error callers see; this is
// the only place that does.
func (s *Server) status(err error) error {
	var br badRequest
	switch {
	case errors.As(err, &br):
		return rpcstatus.New(codes.InvalidArgument, rpcstatus.ReasonBadRequest, "compress: %v", err)
	case errors.Is(err, ErrPixelBomb):
		return rpcstatus.New(codes.InvalidArgument, limits.ReasonPixelBomb, "compress: %v", err)
	case errors.Is(err, ErrTooLarge):
		return rpcstatus.New(codes.InvalidArgument, limits.ReasonTooLarge, "compress: %v", err)
	case errors.Is(err, ErrTooLong):
		return rpcstatus.New(codes.InvalidArgument, limits.ReasonTooLong, "compress: %v", err)
	case errors.Is(err, ErrUnsupported):
		return rpcstatus.New(codes.InvalidArgument, ReasonUnsupportedMedia, "compress: %v", err)
	case errors.Is(err, ErrCorrupt):
		return rpcstatus.New(codes.InvalidArgument, ReasonCorruptMedia, "compress: %v", err)
	case errors.Is(err, ErrSourceMissing):
		return rpcstatus.New(codes.NotFound, ReasonSourceMissing, "compress: %v", err)
	case errors.Is(err, ErrOverload), errors.Is(err, context.DeadlineExceeded):
		return rpcstatus.Overload(shedding.ReasonOverload, s.cfg.RetryAfter, "compress: %v", err)
	case errors.Is(err, context.Canceled):
		return rpcstatus.New(codes.Canceled, rpcstatus.ReasonCanceled, "compress: %v", err)
	case errors.Is(err, ErrVerify):
		return rpcstatus.New(codes.Internal, ReasonVerifyFailed, "compress: %v", err)
	}
	s.log.Error("compress failed", "err", err)
	return rpcstatus.New(codes.Internal, rpcstatus.ReasonInternal, "compress: %v", err)
}

func resultOf(err error) string {
	switch {
	case errors.Is(err, ErrPixelBomb):
		return limits.ReasonPixelBomb
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnsupported):
		return ReasonCorruptMedia
	case errors.Is(err, ErrTooLarge):
		return limits.ReasonTooLarge
	case errors.Is(err, ErrTooLong):
		return limits.ReasonTooLong
	case errors.Is(err, ErrSourceMissing):
		return ReasonSourceMissing
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrOverload):
		return shedding.ReasonOverload
	}
	return "error"
}

func kindName(k willowv1.Kind) string {
	if k == willowv1.Kind_KIND_VIDEO {
		return "video"
	}
	return "image"
}

// queueStats keeps the queueing times of the last second.
type queueStats struct {
	now     func() time.Time
	mu      sync.Mutex // guards the fields below
	samples []queueSample
	waiters map[uint64]time.Time
	next    uint64
}

type queueSample struct {
	at time.Time
	d  time.Duration
}

func (q *queueStats) observe(d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.samples = append(q.samples, queueSample{now, d})
	q.trim(now)
}

func (q *queueStats) trim(now time.Time) {
	i := 0
	for i < len(q.samples) && now.Sub(q.samples[i].at) > time.Second {
		i++
	}
	q.samples = append(q.samples[:0], q.samples[i:]...)
}

func (q *queueStats) enter(t time.Time) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next++
	q.waiters[q.next] = t
	return q.next
}

func (q *queueStats) leave(tok uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.waiters, tok)
}

// p99 is the 99th percentile (nearest rank), in milliseconds, of the same
// queueing times mean averages.
func (q *queueStats) p99() float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.trim(now)
	ds := make([]time.Duration, 0, len(q.samples)+len(q.waiters))
	for _, s := range q.samples {
		ds = append(ds, s.d)
	}
	for _, t := range q.waiters {
		ds = append(ds, now.Sub(t))
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(0.99*float64(len(ds)))) - 1
	return float64(ds[max(i, 0)]) / float64(time.Millisecond)
}

func (q *queueStats) mean() float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.trim(now)
	var sum time.Duration
	n := 0
	for _, s := range q.samples {
		sum += s.d
		n++
	}
	for _, t := range q.waiters {
		sum += now.Sub(t)
		n++
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n) / float64(time.Millisecond)
}
