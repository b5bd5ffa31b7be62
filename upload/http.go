package upload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/limits"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/token"
)

// Defaults of HTTPConfig.
const (
	DefaultHTTPAddr        = "127.0.0.1:0"
	DefaultHTTPBasePath    = "/files/"
	DefaultBodyIdleTimeout = time.Minute
	// takeoverWait bounds how long a request waits for the request it
	// takes an upload over from to stop and make its bytes durable.
	takeoverWait = 10 * time.Second
	httpReadBuf  = 256 << 10
)

// Headers of the Willow-specific parts of the HTTP protocols.
const (
	// HeaderMediaID, HeaderMediaLocation and HeaderMediaRegion are on every
	// response about a committed upload: its media ID (GET
	// /m/{id}/{variant} on any edge cache), where its raw bytes were made
	// durable (store | pool1 | pool2) and the region that accepted it.
	HeaderMediaID       = "Willow-Media-Id"
	HeaderMediaLocation = "Willow-Media-Location"
	HeaderMediaRegion   = "Willow-Media-Region"
	// HeaderBusiness and HeaderUploadID carry the business and the
	// client's upload ID on an IETF upload creation (tus carries them in
	// Upload-Metadata).
	HeaderBusiness = "Willow-Business"
	HeaderUploadID = "Willow-Upload-Id"
)

// HTTPConfig configures the upload front's HTTP endpoint (tus 1.0.0 and
// IETF resumable uploads on one port). Zero values mean the default.
type HTTPConfig struct {
	// Addr is the listen address; default DefaultHTTPAddr.
	Addr string `yaml:"addr"`
	// BasePath is the upload collection; uploads are BasePath + ID.
	// Default DefaultHTTPBasePath.
	BasePath string `yaml:"base_path"`
	// PublicURL, when set, is the collection's URL as clients reach it
	// (behind a proxy), used in Location headers; default
	// http://HOST/BasePath from the request's Host.
	PublicURL string `yaml:"public_url"`
	// CORSOrigins are the origins browsers may upload from ("*": any);
	// empty: none (same-origin only).
	CORSOrigins []string `yaml:"cors_origins"`
	// BodyIdleTimeout ends a request whose body sends nothing for that
	// long (its bytes so far are kept); default DefaultBodyIdleTimeout.
	BodyIdleTimeout time.Duration `yaml:"body_idle_timeout"`
}

// HTTP serves the upload front's HTTP protocols over a Server's sessions:
// tus 1.0.0 (core, creation, creation-with-upload, termination,
// expiration, checksum) and the IETF resumable-upload draft, told apart by
// the Tus-Resumable and Upload-Draft-Interop-Version request headers.
// Create with NewHTTP before the node runs, then Run.
type HTTP struct {
	s       *Server
	cfg     HTTPConfig
	lis     net.Listener
	srv     *http.Server
	origins map[string]bool
	anyOrig bool
	m       *httpMetrics

	mu       sync.Mutex // guards inflight
	inflight map[string]*inflight
}

// inflight is the request currently writing to an upload over HTTP.
type inflight struct {
	rc    *http.ResponseController
	taken atomic.Bool
	done  chan struct{}
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	body     prometheus.Counter
}

// NewHTTP listens on cfg.Addr and advertises the address as the node's
// HTTP address. Errors: a bad config or a failed listen.
func NewHTTP(s *Server, cfg HTTPConfig) (*HTTP, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultHTTPAddr
	}
	if cfg.BasePath == "" {
		cfg.BasePath = DefaultHTTPBasePath
	}
	if !strings.HasPrefix(cfg.BasePath, "/") || !strings.HasSuffix(cfg.BasePath, "/") {
		return nil, fmt.Errorf("upload: http base path %q must start and end with /", cfg.BasePath)
	}
	if cfg.PublicURL != "" && !strings.HasSuffix(cfg.PublicURL, "/") {
		cfg.PublicURL += "/"
	}
	if cfg.BodyIdleTimeout <= 0 {
		cfg.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	h := &HTTP{s: s, cfg: cfg, origins: map[string]bool{}, inflight: map[string]*inflight{}}
	for _, o := range cfg.CORSOrigins {
		if o == "*" {
			h.anyOrig = true
		}
		h.origins[strings.TrimSuffix(o, "/")] = true
	}
	h.m = &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "willow_upload_http_requests_total",
			Help: "HTTP upload requests by protocol (tus, ietf), method and status code."}, []string{"protocol", "method", "code"}),
		body: prometheus.NewCounter(prometheus.CounterOpts{Name: "willow_upload_http_body_bytes_total",
			Help: "Upload bytes received in HTTP request bodies (resent bytes counted again)."}),
	}
	for _, p := range []string{"tus", "ietf"} {
		h.m.requests.WithLabelValues(p, http.MethodPost, "201")
	}
	if err := s.node.Registry().Register(h.m.requests); err != nil {
		return nil, fmt.Errorf("upload: http metrics: %w", err)
	}
	if err := s.node.Registry().Register(h.m.body); err != nil {
		return nil, fmt.Errorf("upload: http metrics: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("upload: listen http %s: %w", cfg.Addr, err)
	}
	h.lis = s.node.CountListener(lis) // counted as the node's network traffic
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if err := s.node.SetHTTPAddr(lis.Addr().String()); err != nil {
		lis.Close()
		return nil, fmt.Errorf("upload: %w", err)
	}
	return h, nil
}

// Addr is the address the HTTP listener is bound to.
func (h *HTTP) Addr() string { return h.lis.Addr().String() }

// URL is the upload collection's URL (tus endpoint, IETF creation target)
// at the node's advertised HTTP address, e.g. http://127.0.0.1:PORT/files/,
// or HTTPConfig.PublicURL.
func (h *HTTP) URL() string {
	if h.cfg.PublicURL != "" {
		return h.cfg.PublicURL
	}
	addr := h.s.node.Config().HTTPAddr
	if addr == "" {
		addr = h.Addr()
	}
	return "http://" + addr + h.cfg.BasePath
}

// Handler returns the HTTP handler (tests mount it on their own server).
func (h *HTTP) Handler() http.Handler { return h }

// Run serves until ctx is done, then shuts down gracefully.
func (h *HTTP) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		if err := h.srv.Serve(h.lis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	h.s.log.Info("upload http serving", "url", h.URL())
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := h.srv.Shutdown(sctx); serr != nil && err == nil {
		err = fmt.Errorf("upload: http shutdown: %w", serr)
	}
	return err
}

// protocol is what a request speaks.
type protocol struct {
	ietf    bool
	interop int // IETF draft interop version
}

func (p protocol) name() string {
	if p.ietf {
		return "ietf"
	}
	return "tus"
}

// Supported versions.
const (
	tusVersion = "1.0.0"
	// tusExtensions are the tus extensions the front implements.
	tusExtensions = "creation,creation-with-upload,termination,expiration,checksum"
	tusChecksums  = "sha1,sha256"
	// IETFInteropVersion is the interop version of the current IETF draft
	// (draft-ietf-httpbis-resumable-upload-09 and later).
	IETFInteropVersion = 8
	// IETFInteropURLSession is the interop version Apple's URLSession
	// sends (draft -04/-05).
	IETFInteropURLSession = 6
)

func supportedInterop(v int) bool { return v >= IETFInteropURLSession && v <= IETFInteropVersion }

// statusRecorder remembers the final status code for the metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if code >= 200 && w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP implements http.Handler.
func (h *HTTP) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if h.cors(rw, r) {
		return
	}
	w := &statusRecorder{ResponseWriter: rw}
	method := r.Method
	if o := r.Header.Get("X-HTTP-Method-Override"); o != "" && method == http.MethodPost {
		method = strings.ToUpper(o)
	}
	var p protocol
	if v := r.Header.Get("Upload-Draft-Interop-Version"); v != "" {
		p.ietf = true
		p.interop, _ = strconv.Atoi(strings.TrimSpace(v))
	}
	start := time.Now()
	defer func() {
		code := w.code
		if code == 0 {
			code = http.StatusOK
		}
		h.m.requests.WithLabelValues(p.name(), method, strconv.Itoa(code)).Inc()
		h.s.node.ObserveLatency(time.Since(start)) // the heartbeat's p99 (console trends)
	}()
	if !p.ietf {
		w.Header().Set("Tus-Resumable", tusVersion)
	}
	if !strings.HasPrefix(r.URL.Path, h.cfg.BasePath) && r.URL.Path+"/" != h.cfg.BasePath {
		h.fail(w, p, fail(rpcstatus.ReasonNotFound, "no such path; uploads live under %s", h.cfg.BasePath))
		return
	}
	id := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, h.cfg.BasePath[:len(h.cfg.BasePath)-1]), "/")
	if method == http.MethodOptions {
		h.options(w, p)
		return
	}
	switch {
	case p.ietf && !supportedInterop(p.interop):
		h.fail(w, p, fail(ReasonUnsupportedInterop, "Upload-Draft-Interop-Version %q is not supported; use %d to %d",
			r.Header.Get("Upload-Draft-Interop-Version"), IETFInteropURLSession, IETFInteropVersion))
		return
	case !p.ietf && r.Header.Get("Tus-Resumable") != tusVersion:
		w.Header().Set("Tus-Version", tusVersion)
		h.writeErr(w, p, http.StatusPreconditionFailed, "unsupported_version",
			"send Tus-Resumable: 1.0.0 (tus) or Upload-Draft-Interop-Version (IETF resumable uploads)", 0)
		return
	}
	switch {
	case id == "" && method == http.MethodPost:
		if p.ietf {
			h.ietfCreate(w, r, p)
		} else {
			h.tusCreate(w, r, p)
		}
	case id != "" && !strings.Contains(id, "/") && method == http.MethodHead:
		h.head(w, r, p, id)
	case id != "" && !strings.Contains(id, "/") && method == http.MethodPatch:
		if p.ietf {
			h.ietfAppend(w, r, p, id)
		} else {
			h.tusPatch(w, r, p, id)
		}
	case id != "" && !strings.Contains(id, "/") && method == http.MethodDelete:
		h.terminate(w, r, p, id)
	default:
		w.Header().Set("Allow", "OPTIONS, POST, HEAD, PATCH, DELETE")
		h.writeErr(w, p, http.StatusMethodNotAllowed, "method_not_allowed", method+" "+r.URL.Path+" is not an upload operation", 0)
	}
}

// corsAllowHeaders and corsExposeHeaders are the request headers browsers
// may send and the response headers scripts may read.
const (
	corsAllowHeaders = "Authorization, Content-Type, Content-Disposition, Tus-Resumable, Upload-Length, Upload-Offset, " +
		"Upload-Metadata, Upload-Checksum, Upload-Defer-Length, Upload-Concat, Upload-Complete, Upload-Draft-Interop-Version, " +
		"X-HTTP-Method-Override, X-Requested-With, Willow-Business, Willow-Upload-Id"
	corsExposeHeaders = "Location, Upload-Offset, Upload-Length, Upload-Metadata, Upload-Expires, Tus-Version, Tus-Resumable, " +
		"Tus-Max-Size, Tus-Extension, Tus-Checksum-Algorithm, Upload-Complete, Upload-Limit, Upload-Draft-Interop-Version, " +
		"Retry-After, Willow-Media-Id, Willow-Media-Location, Willow-Media-Region"
)

// cors sets the CORS headers for an allowed Origin and answers a preflight
// request; it returns true when the request was a preflight.
func (h *HTTP) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	if origin == "" {
		return false
	}
	w.Header().Add("Vary", "Origin")
	if !h.anyOrig && !h.origins[origin] {
		if preflight {
			http.Error(w, "origin not allowed", http.StatusForbidden)
			h.m.requests.WithLabelValues("cors", r.Method, "403").Inc()
		}
		return preflight
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	if !preflight {
		w.Header().Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return false
	}
	w.Header().Set("Access-Control-Allow-Methods", "POST, HEAD, PATCH, DELETE, OPTIONS")
	w.Header().Set("Access-Control-Allow-Headers", corsAllowHeaders)
	w.Header().Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
	h.m.requests.WithLabelValues("cors", r.Method, "204").Inc()
	return true
}

// options answers OPTIONS: what the endpoint supports.
func (h *HTTP) options(w http.ResponseWriter, p protocol) {
	hd := w.Header()
	hd.Set("Tus-Version", tusVersion)
	hd.Set("Tus-Extension", tusExtensions)
	hd.Set("Tus-Max-Size", strconv.FormatInt(h.s.MaxSize(), 10))
	hd.Set("Tus-Checksum-Algorithm", tusChecksums)
	if p.ietf && supportedInterop(p.interop) {
		hd.Set("Upload-Limit", h.limits(p, h.s.MaxSize(), time.Time{}))
	}
	w.WriteHeader(http.StatusNoContent)
}

// limits is the IETF Upload-Limit value.
func (h *HTTP) limits(p protocol, maxSize int64, expires time.Time) string {
	v := "max-size=" + strconv.FormatInt(maxSize, 10)
	if !expires.IsZero() {
		age := int64(math.Max(0, math.Ceil(expires.Sub(h.s.now()).Seconds())))
		if p.interop <= IETFInteropURLSession {
			v += ",expires=" + strconv.FormatInt(age, 10)
		} else {
			v += ",max-age=" + strconv.FormatInt(age, 10)
		}
	}
	return v
}

// uploadURL is the URL of upload key, as Location.
func (h *HTTP) uploadURL(r *http.Request, key string) string {
	if h.cfg.PublicURL != "" {
		return h.cfg.PublicURL + key
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + h.cfg.BasePath + key
}

// HTTP routes of the upload front, as they appear in HTTPRoutes.
const (
	RouteOptions = "HTTP OPTIONS /files/"
	RouteCreate  = "HTTP POST /files/"
	RouteHead    = "HTTP HEAD /files/{id}"
	RoutePatch   = "HTTP PATCH /files/{id}"
	RouteDelete  = "HTTP DELETE /files/{id}"
)

// HTTPRoutes is the caller-class table of the upload front's HTTP routes
// (package auth): OPTIONS (capabilities, CORS preflight) is public; every
// other route is the client's own, with its upload token on every request.
func HTTPRoutes() auth.Table {
	client := auth.Rule{Classes: auth.Client}
	return auth.Table{
		RouteOptions: {Classes: auth.Public},
		RouteCreate:  client, RouteHead: client, RoutePatch: client, RouteDelete: client,
	}
}

var httpRoutes = HTTPRoutes()

// claims authenticates a request of route: the upload token as
// Authorization: Bearer TOKEN, checked by the node's guard (when it has
// credentials) against HTTPRoutes and verified here for its claims.
func (h *HTTP) claims(r *http.Request, route string) (token.Claims, string, error) {
	if g := h.s.node.Guard(); g != nil && !g.IsOpen() {
		if _, err := g.AuthorizeHTTP(r, httpRoutes[route]); err != nil {
			return token.Claims{}, "", err
		}
	}
	a := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(a, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return token.Claims{}, "", fail(ReasonTokenMissing, "send the upload token as Authorization: Bearer TOKEN")
	}
	tok = strings.TrimSpace(tok)
	c, err := h.s.verifyToken(tok)
	return c, tok, err
}

// begin runs admission and the session's Begin for a creation request
// of the token's c, the business and upload ID defaulting to the token's
// business and a fresh ID, and sets Location to the upload's URL. On
// failure it has answered the request and ok is false; release ends the
// admission either way.
func (h *HTTP) begin(w http.ResponseWriter, r *http.Request, p protocol, c token.Claims, bp BeginParams) (ss SessionState, release func(), ok bool) {
	if bp.Business == "" {
		bp.Business = c.Business
	}
	if bp.UploadID == "" {
		bp.UploadID = newUploadID()
	}
	ctx := r.Context()
	release = func() {}
	var err error
	if sh := h.s.node.Shedder(); sh != nil {
		gctx, rel, gerr := sh.Gate(ctx, willowv1.Upload_Begin_FullMethodName, bp.Business, bp.User)
		if rel != nil {
			release = rel
		}
		ctx, err = gctx, gerr
	}
	if err == nil {
		ss, err = h.s.beginSession(ctx, bp)
	}
	if err != nil {
		h.fail(w, p, err)
		return ss, release, false
	}
	w.Header().Set("Location", h.uploadURL(r, ss.Key))
	return ss, release, true
}

// newUploadID makes an upload ID for a client that sent none.
func newUploadID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "http-" + hex.EncodeToString(b)
}

// kindFor picks image or video from an explicit kind or the content type.
func kindFor(kind, contentType string) willowv1.Kind {
	switch {
	case kind == "video", kind == "" && strings.HasPrefix(strings.ToLower(contentType), "video/"):
		return willowv1.Kind_KIND_VIDEO
	case kind == "image", kind == "":
		return willowv1.Kind_KIND_IMAGE
	}
	return willowv1.Kind_KIND_UNSPECIFIED
}

// takeover makes the calling request the only one working on upload key:
// a request still writing to it (the client gave it up: its connection
// broke where the server has not noticed yet) is stopped, and its bytes
// made durable, before release is returned.
func (h *HTTP) takeover(w http.ResponseWriter, key string) (release func(), err error) {
	me := &inflight{rc: http.NewResponseController(w), done: make(chan struct{})}
	deadline := time.NewTimer(takeoverWait)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		prev := h.inflight[key]
		if prev == nil {
			h.inflight[key] = me
			h.mu.Unlock()
			return func() {
				h.mu.Lock()
				if h.inflight[key] == me {
					delete(h.inflight, key)
				}
				h.mu.Unlock()
				close(me.done)
			}, nil
		}
		h.mu.Unlock()
		prev.taken.Store(true)
		_ = prev.rc.SetReadDeadline(time.Now())
		select {
		case <-prev.done:
		case <-deadline.C:
			return nil, fail(ReasonUploadBusy, "another request is still writing upload %s", key)
		}
	}
}

// current returns the in-flight record of the calling request.
func (h *HTTP) current(key string) *inflight {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflight[key]
}

// receive appends r's body to st from off. It stops at the body's end, at
// a broken or idle connection, or when another request takes the upload
// over, and syncs before it returns the durable offset; whole is true when
// the whole body was read. commits: the caller commits the upload when the
// whole body brings it to its length, so then receive returns the length
// without syncing or recording it as an offset (the commit makes the raw
// durable, and records the offset only if it fails). progress, when set, is called with
// each new durable offset while the body is read. err is a protocol error
// (pixel bomb, bytes beyond the upload's length, a mismatch) or a failed
// sync.
func (h *HTTP) receive(r *http.Request, st *staged, off int64, me *inflight, commits bool, progress func(int64)) (durable int64, whole bool, err error) {
	bp := httpBufs.Get().(*[]byte)
	defer httpBufs.Put(bp)
	buf := *bp
	_, lastDurable := st.Offsets()
	size := st.meta.Size
	body := h.body(r, me)
	for {
		// Whole buffers: one large write and hash per 256 KiB, not one per
		// socket read (a few KiB each). What arrived before an error is
		// still written.
		n, rerr := io.ReadFull(body, buf)
		if errors.Is(rerr, io.ErrUnexpectedEOF) {
			rerr = io.EOF
		}
		if n > 0 {
			h.m.body.Add(float64(n))
			if off+int64(n) > size {
				err = fail(ReasonChunkOutOfRange, "the body runs past the upload's length of %d bytes", size)
				break
			}
			if err = h.s.writeSession(st, off, buf[:n]); err != nil {
				break
			}
			off += int64(n)
			if _, d := st.Offsets(); d != lastDurable && progress != nil {
				lastDurable = d
				progress(d)
			}
		}
		if errors.Is(rerr, io.EOF) {
			whole = true
			break
		}
		if rerr != nil {
			break // broken, idle or taken over: keep what arrived
		}
	}
	if commits && whole && err == nil {
		if written, _ := st.Offsets(); written == size {
			return written, true, nil
		}
	}
	durable, serr := st.Sync()
	if err == nil && serr != nil {
		err = chunkErr(serr)
	}
	return durable, whole && err == nil, err
}

// httpBufs are the bodies' read buffers (httpReadBuf bytes), reused
// across requests: their bytes are written and hashed before the next
// read, never kept.
var httpBufs = sync.Pool{New: func() any { b := make([]byte, httpReadBuf); return &b }}

// body is r's body, read with the idle timeout and stopped by a takeover.
func (h *HTTP) body(r *http.Request, me *inflight) io.Reader {
	return &idleReader{r: r.Body, me: me, idle: h.cfg.BodyIdleTimeout}
}

// errTakenOver ends the body of a request another one took over from.
var errTakenOver = errors.New("upload taken over by a newer request")

// idleReader sets the connection's read deadline before each Read (the
// idle timeout) and stops once its request is taken over.
type idleReader struct {
	r    io.Reader
	me   *inflight
	idle time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	if ir.me != nil {
		_ = ir.me.rc.SetReadDeadline(time.Now().Add(ir.idle))
		// After setting the deadline: a takeover sets taken, then the
		// deadline, so one of the two is seen.
		if ir.me.taken.Load() {
			return 0, errTakenOver
		}
	}
	return ir.r.Read(p)
}

// setOutcome sets the headers of a committed upload.
func setOutcome(w http.ResponseWriter, o *Outcome) {
	w.Header().Set(HeaderMediaID, o.MediaID)
	w.Header().Set(HeaderMediaLocation, o.Location)
	if o.Region != "" {
		w.Header().Set(HeaderMediaRegion, o.Region)
	}
}

// outcomeBody is the JSON body of a committed upload's final response.
type outcomeBody struct {
	MediaID   string   `json:"media_id"`
	Location  string   `json:"location"`
	Region    string   `json:"region,omitempty"`
	Size      int64    `json:"size"`
	Duplicate bool     `json:"duplicate"`
	Variants  []string `json:"variants"`
}

func writeOutcome(w http.ResponseWriter, code int, o *Outcome, size int64) {
	setOutcome(w, o)
	b := outcomeBody{MediaID: o.MediaID, Location: o.Location, Region: o.Region, Size: size, Duplicate: o.Duplicate, Variants: []string{}}
	for _, v := range o.Variants {
		b.Variants = append(b.Variants, v.GetName())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(b)
}

// httpStatus maps a session error to an HTTP status: the one place where
// upload errors become HTTP codes. The reason is the rpcstatus reason.
func httpStatus(err error) (code int, reason, msg string, retryAfter time.Duration) {
	st, _ := status.FromError(err)
	reason, msg, retryAfter = rpcstatus.Reason(err), st.Message(), rpcstatus.RetryAfter(err)
	if reason == "" {
		reason = strings.ToLower(st.Code().String())
	}
	switch st.Code() {
	case codes.InvalidArgument:
		switch reason {
		case limits.ReasonTooLarge, ReasonChunkOutOfRange:
			return http.StatusRequestEntityTooLarge, reason, msg, 0
		case ReasonChunkOutOfOrder, ReasonChunkMismatch, ReasonUploadConflict:
			return http.StatusConflict, reason, msg, 0
		case ReasonSHA256Mismatch, ReasonChecksumMismatch:
			return 460, reason, msg, 0 // tus: checksum mismatch
		case ReasonUnsupportedFormat:
			return http.StatusUnsupportedMediaType, reason, msg, 0
		}
		return http.StatusBadRequest, reason, msg, 0
	case codes.Unauthenticated:
		return http.StatusUnauthorized, reason, msg, 0
	case codes.PermissionDenied:
		return http.StatusForbidden, reason, msg, 0
	case codes.NotFound:
		if reason == ReasonUploadExpired {
			return http.StatusGone, reason, msg, 0
		}
		return http.StatusNotFound, reason, msg, 0
	case codes.FailedPrecondition, codes.AlreadyExists:
		return http.StatusConflict, reason, msg, 0
	case codes.ResourceExhausted:
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
		if reason == shedding.ReasonShedRatio {
			return http.StatusTooManyRequests, reason, msg, retryAfter
		}
		return http.StatusServiceUnavailable, reason, msg, retryAfter
	case codes.Unavailable:
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
		return http.StatusServiceUnavailable, reason, msg, retryAfter
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, reason, msg, 0
	case codes.Canceled:
		return http.StatusRequestTimeout, reason, msg, 0
	}
	return http.StatusInternalServerError, reason, msg, 0
}

// errorBody is the JSON body of an error response.
type errorBody struct {
	Status  int    `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (h *HTTP) fail(w http.ResponseWriter, p protocol, err error) {
	code, reason, msg, ra := httpStatus(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="willow-upload"`)
	}
	h.writeErr(w, p, code, reason, msg, ra)
}

func (h *HTTP) writeErr(w http.ResponseWriter, p protocol, code int, reason, msg string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(retryAfter.Seconds())), 10))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Status: code, Reason: reason, Message: msg})
}

// openSession authenticates a request on route for the upload key, takes
// the upload over from any stale request still writing to it, and returns
// its state and the release of that takeover. On failure it has answered
// the request and ok is false.
func (h *HTTP) openSession(w http.ResponseWriter, r *http.Request, p protocol, route, key string) (ss SessionState, release func(), ok bool) {
	c, _, err := h.claims(r, route)
	if err != nil {
		h.fail(w, p, err)
		return ss, nil, false
	}
	_, ss, release, ok = h.takeSession(w, r, p, key, c.User)
	return ss, release, ok
}

// takeSession takes upload key of user over from any stale request still
// writing to it and returns it (st is nil when it is committed and gone
// from staging) with its state and the release of that takeover. On
// failure it has answered the request and ok is false.
func (h *HTTP) takeSession(w http.ResponseWriter, r *http.Request, p protocol, key, user string) (st *staged, ss SessionState, release func(), ok bool) {
	release, err := h.takeover(w, key)
	if err != nil {
		h.fail(w, p, err)
		return nil, ss, nil, false
	}
	if st, ss, err = h.s.sessionOf(r.Context(), key, user); err != nil {
		h.fail(w, p, err)
		release()
		return nil, ss, nil, false
	}
	return st, ss, release, true
}

// appendRequest checks what every append (tus PATCH, IETF upload append)
// starts with: the body's media type contentType, Upload-Offset and the
// caller's token. It returns the offset and the token's user; on failure
// it has answered the request and ok is false.
func (h *HTTP) appendRequest(w http.ResponseWriter, r *http.Request, p protocol, contentType string) (off int64, user string, ok bool) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != contentType {
		h.writeErr(w, p, http.StatusUnsupportedMediaType, "bad_content_type", "an append needs Content-Type: "+contentType, 0)
		return 0, "", false
	}
	if off, ok = parseSFInt(r.Header.Get("Upload-Offset")); !ok {
		h.fail(w, p, fail(ReasonBadOffset, "an append needs Upload-Offset, a non-negative integer"))
		return 0, "", false
	}
	c, _, err := h.claims(r, RoutePatch)
	if err != nil {
		h.fail(w, p, err)
		return 0, "", false
	}
	return off, c.User, true
}

// head answers HEAD for both protocols: the upload's offset.
func (h *HTTP) head(w http.ResponseWriter, r *http.Request, p protocol, key string) {
	ss, release, ok := h.openSession(w, r, p, RouteHead, key)
	if !ok {
		return
	}
	defer release()
	if !p.ietf && ss.Committed == nil && ss.Offset == ss.Size {
		// In tus, offset == length is the acknowledgement: it is only
		// ever reported after the commit (a commit that failed after the
		// last PATCH is retried here).
		o, err := h.s.commitSession(r.Context(), key, false) // tus: no variants in the answer
		if err != nil {
			h.fail(w, p, err)
			return
		}
		ss.Committed = &o
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("Upload-Offset", strconv.FormatInt(ss.Offset, 10))
	hd.Set("Upload-Length", strconv.FormatInt(ss.Size, 10))
	if ss.Committed != nil {
		setOutcome(w, ss.Committed)
	} else if !p.ietf {
		hd.Set("Upload-Expires", ss.Expires.UTC().Format(http.TimeFormat))
	}
	if p.ietf {
		hd.Set("Upload-Complete", sfBool(ss.Committed != nil))
		var exp time.Time
		if ss.Committed == nil {
			exp = ss.Expires
		}
		hd.Set("Upload-Limit", h.limits(p, ss.Size, exp))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	hd.Set("Upload-Metadata", encodeMetadata(ss.Meta))
	w.WriteHeader(http.StatusOK)
}

// terminate answers DELETE for both protocols.
func (h *HTTP) terminate(w http.ResponseWriter, r *http.Request, p protocol, key string) {
	ss, release, ok := h.openSession(w, r, p, RouteDelete, key)
	if !ok {
		return
	}
	defer release()
	if ss.Committed != nil {
		setOutcome(w, ss.Committed)
	}
	if err := h.s.terminateSession(key); err != nil {
		h.fail(w, p, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func sfBool(b bool) string {
	if b {
		return "?1"
	}
	return "?0"
}

// parseSFBool parses a Structured Field Boolean; ok is false for anything
// else (the header is then ignored, as the draft says).
func parseSFBool(v string) (b, ok bool) {
	switch strings.TrimSpace(v) {
	case "?1":
		return true, true
	case "?0":
		return false, true
	}
	return false, false
}

// parseSFInt parses a non-negative Structured Field Integer (at most 15
// digits); ok is false for anything else.
func parseSFInt(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 15 || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
