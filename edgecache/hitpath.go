package edgecache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The hit path. Almost every request an edge answers is a plain cached
// hit: GET or HEAD /m/ID/VARIANT, no Range or conditional header, the
// object in a tier. For such a hit net/http's per-request machinery (a
// Request with its header map and URL, a context and a background read
// per request, the response header map sorted and written, a flush of
// the header before the body) cost the edge more CPU than nginx spends on
// the whole request (BENCHMARKS.md, Edge cache 2). So the HTTP listener's
// connections are served here first: a request's head is read into the
// connection's buffer and, when it is a plain hit, answered with header
// bytes made once per object and the body in the same writev (or, for a
// large object the disk tier holds, the header sent (with MSG_MORE when
// headerMore says) and the body by sendfile(2) from the tier's file).
//
// At the first request that is anything else (a miss, Range, a
// conditional header, HTTP/1.0, a body, Expect, Connection other than
// keep-alive, a header this parser does not take, anything malformed)
// the connection, with every byte already read, is handed to net/http,
// which serves it from then on. prepare runs on both paths and changes
// nothing, so a request given up on is answered exactly as before. What
// the hit path answers itself besides hits is admission's refusal (429),
// through writeError like every other error.

// hitHeadBytes is the connection's read buffer: a request head that does
// not fit goes to net/http (which takes up to 1 MB).
const hitHeadBytes = 4 << 10

var errHandOff = errors.New("not for the hit path")

// hitServer serves the HTTP listener's connections (see above).
type hitServer struct {
	s       *Server
	lis     net.Listener // the node's counted TCP listener
	handoff *handoffListener
	idle    time.Duration // as http.Server.IdleTimeout
	header  time.Duration // as http.Server.ReadHeaderTimeout
	send    time.Duration // httpSendTimeout: a response's time without progress
	date    atomic.Pointer[dateLine]
	served  atomic.Int64 // requests answered here (tests)

	mu      sync.Mutex // guards conns; closing is set under it
	conns   map[*hitConn]struct{}
	closing atomic.Bool
	wg      sync.WaitGroup
}

func newHitServer(s *Server, lis net.Listener, idle, header time.Duration) *hitServer {
	return &hitServer{
		s: s, lis: lis, idle: idle, header: header, send: httpSendTimeout,
		handoff: &handoffListener{addr: lis.Addr(), conns: make(chan net.Conn), done: make(chan struct{})},
		conns:   map[*hitConn]struct{}{},
	}
}

// serve accepts connections until the listener is closed. Accept errors
// other than a closed listener (out of descriptors) are retried after a
// pause, as net/http does.
func (h *hitServer) serve() error {
	var pause time.Duration
	for {
		c, err := h.lis.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			h.s.log.Warn("http accept", "err", err, "retry_in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		hc := &hitConn{h: h, c: c}
		hc.out.dl.timeout = h.send
		hc.rf, _ = c.(io.ReaderFrom)
		hc.br = bufio.NewReaderSize(hc.reader(), hitHeadBytes)
		h.mu.Lock()
		if h.closing.Load() {
			h.mu.Unlock()
			c.Close()
			return nil
		}
		h.conns[hc] = struct{}{}
		h.wg.Add(1)
		h.mu.Unlock()
		go hc.serve()
	}
}

// shutdown stops accepting, closes the connections waiting for a
// request, and waits until those serving one have finished it (or
// handed it to net/http), or until ctx is done.
func (h *hitServer) shutdown(ctx context.Context) error {
	h.lis.Close()
	h.mu.Lock()
	h.closing.Store(true)
	for c := range h.conns {
		c.c.SetReadDeadline(time.Unix(1, 0)) // a waiting read returns now
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dateLine is the Date header line of one second.
type dateLine struct {
	sec  int64
	line []byte
}

func (h *hitServer) dateLine(now time.Time) []byte {
	d := h.date.Load()
	if d == nil || d.sec != now.Unix() {
		b := append([]byte("Date: "), now.UTC().Format(http.TimeFormat)...)
		d = &dateLine{now.Unix(), append(b, "\r\n"...)}
		h.date.Store(d)
	}
	return d.line
}

// hitConn is one connection while the hit path serves it.
type hitConn struct {
	h   *hitServer
	c   net.Conn      // as accepted (counted by the node)
	rf  io.ReaderFrom // c's, through which responses go (counted), or nil
	br  *bufio.Reader // reads c
	hdr []byte        // the response header being built
	out hitWrite
	// idleSet is when the idle read deadline was last set; zero when the
	// header deadline replaced it.
	idleSet time.Time
	// admitted: the request being handed to net/http was admitted here
	// (a sliced miss): serveHTTP does not admit it again.
	admitted bool
	rr       rawReader
	answers  int // hits writeHit answered on this connection
}

// countedConn is the node's counted connection (node.CountListener):
// the TCP connection it wraps, and the count of bytes read from it
// without its Read.
type countedConn interface {
	NetConn() net.Conn
	CountRead(n int)
}

// reader returns what the connection's buffer reads from: the socket
// itself by raw read(2) calls, counted by the node's counting wrapper,
// when c is a TCP connection under that wrapper, else c.
func (c *hitConn) reader() io.Reader {
	cc, ok := c.c.(countedConn)
	if !ok {
		return c.c
	}
	sc, ok := cc.NetConn().(syscall.Conn)
	if !ok {
		return c.c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c.c
	}
	c.rr = rawReader{rc: rc, count: cc}
	c.rr.readf = c.rr.read
	return &c.rr
}

// rawReader reads a socket with raw read(2) calls, waiting in the
// runtime's poller (under the connection's read deadline) while the
// socket is empty, as a Go read does, but without the runtime's Syscall:
// after the process was idle, that woke the runtime's sysmon thread on
// the first read of a request (BENCHMARKS.md, Edge cache 2, session 11).
// What it reads is counted by the connection it reads under (count), as
// that connection's own reads are: once, also after a hand-off, where
// net/http reads the bytes already read from the buffer, not the socket.
type rawReader struct {
	rc    syscall.RawConn
	readf func(uintptr) bool // read
	p     []byte             // read's buffer, n and errno its result
	n     int
	errno syscall.Errno
	count countedConn
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.readf)
	r.p = nil
	switch {
	case err != nil:
		return 0, err // closed, or the read deadline passed
	case r.errno != 0:
		return 0, os.NewSyscallError("read", r.errno)
	case r.n == 0:
		return 0, io.EOF
	}
	r.count.CountRead(r.n)
	return r.n, nil
}

// read is rc.Read's function: false means wait until the socket is
// readable and call again.
func (r *rawReader) read(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.n, r.errno = int(n), errno
		return true
	}
}

func (c *hitConn) serve() {
	defer c.h.wg.Done()
	// now is when the connection last became idle: accepted, or its last
	// answer written (the clock read answer times the request with).
	now := time.Now()
	for {
		c.idleDeadline(now)
		if c.h.closing.Load() {
			c.drop()
			return
		}
		head, err := c.readHead()
		if err == nil {
			now, err = c.answer(head)
		}
		switch {
		case errors.Is(err, errHandOff):
			c.handOff()
			return
		case err != nil:
			c.drop()
			return
		}
	}
}

// idleDeadlineSlack is how stale the idle read deadline may be: it is set
// again only when it was set at least this long ago (or a sixteenth of
// the idle timeout, if less), so a connection serving requests back to
// back does not move its timer on every request; the idle timeout a
// connection gets is between idle minus the slack and idle.
const idleDeadlineSlack = time.Second

// idleDeadline sets the read deadline for waiting for the next request
// (the idle timeout from now), unless one set within the slack is in
// force. shutdown's deadline in the past always wins: it is set after
// closing, which serve checks after this.
func (c *hitConn) idleDeadline(now time.Time) {
	slack := min(idleDeadlineSlack, c.h.idle/16)
	if !c.idleSet.IsZero() && now.Sub(c.idleSet) < slack {
		return
	}
	c.c.SetReadDeadline(now.Add(c.h.idle))
	c.idleSet = now
}

// readHead waits for a request head (under the idle timeout, then the
// header timeout once its first bytes are in) and returns it, still
// unread in the buffer. A head larger than the buffer is errHandOff.
func (c *hitConn) readHead() ([]byte, error) {
	if _, err := c.br.Peek(1); err != nil {
		return nil, err
	}
	for seen, timed := 0, false; ; {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf[seen:], crlf2); i >= 0 {
			return buf[:seen+i+len(crlf2)], nil
		}
		if len(buf) >= hitHeadBytes {
			return nil, errHandOff
		}
		seen = max(len(buf)-len(crlf2)+1, 0)
		if !timed {
			c.c.SetReadDeadline(time.Now().Add(c.h.header))
			c.idleSet, timed = time.Time{}, true
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

var crlf2 = []byte("\r\n\r\n")

// answer answers one request whose head is in the buffer (a hit, a miss
// filled here, an error after admission) and returns when it finished
// writing, or returns errHandOff (the head left unread) for net/http:
// anything parseHitHead or prepare does not take, and sliced objects.
func (c *hitConn) answer(head []byte) (time.Time, error) {
	hr, ok := parseHitHead(head)
	if !ok {
		return time.Time{}, errHandOff
	}
	start := time.Now()
	s := c.h.s
	d := download{rest: string(hr.rest), business: string(hr.business), user: string(hr.user)}
	if hr.query != nil {
		d.query, _ = url.ParseQuery(string(hr.query)) // as Request.URL.Query
	}
	for _, a := range hr.accept[:hr.accepts] {
		d.accept = append(d.accept, string(a))
	}
	rq, signed, err := s.prepare(context.Background(), d)
	if err != nil {
		return time.Time{}, errHandOff // serveHTTP answers it, the same way
	}
	method := http.MethodGet
	if hr.head {
		method = http.MethodHead
	}
	o, tier, cached := s.cachedHit(rq)
	if err := s.admit(rq.who.business, rq.who.user); err != nil {
		c.br.Discard(len(head))
		return c.writeError(err, method, start)
	}
	if !cached {
		// A miss, filled here as serveHTTP fills it, so that the
		// connection stays on the hit path.
		o, tier, err = s.find(context.Background(), rq)
		if err == nil && o.sliced {
			// ServeContent reads the slices: net/http answers it,
			// without admitting it a second time.
			c.admitted = true
			return time.Time{}, errHandOff
		}
		if err != nil {
			c.br.Discard(len(head))
			return c.writeError(err, method, start)
		}
	}
	c.br.Discard(len(head))
	s.m.hit(tier)
	c.h.served.Add(1)
	if !hr.head {
		// Counted before the client can see the last byte, as net/http's
		// buffered answers are.
		s.m.bytesHTTP.Add(float64(len(o.data)))
	}
	err = c.writeHit(rq, o, signed, hr.head, start)
	end := time.Now()
	s.m.http.took(http.StatusOK, method, end.Sub(start))
	return end, err
}

// cachedHit returns the representation rq asks for when a tier holds it
// whole (not a sliced head): what lookup and represent would answer
// without a fill.
func (s *Server) cachedHit(rq req) (*object, string, bool) {
	o, tier, ok := s.cached(rq.base())
	if !ok || o.sliced {
		return nil, "", false
	}
	if rq.wantsJPEGOf(o) {
		if o, tier, ok = s.cached(rq.jpegKey()); !ok || o.sliced {
			return nil, "", false
		}
	}
	return o, tier, true
}

// writeHit writes the response to a hit on o.
func (c *hitConn) writeHit(rq req, o *object, signed, head bool, now time.Time) error {
	b := append(c.hdr[:0], "HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nCache-Control: "...)
	if signed {
		b = append(b, cacheControlPrivate...)
	} else {
		b = append(b, cacheControl...)
	}
	b = append(b, "\r\n"...)
	b = append(b, o.headers().wire...)
	b = append(b, c.h.dateLine(now)...)
	if negotiable(rq.variant) {
		b = append(b, "Vary: Accept\r\n"...)
	}
	b = append(b, "X-Content-Type-Options: nosniff\r\n\r\n"...)
	c.hdr = b
	c.out.hdr, c.out.body, c.out.fd, c.out.sent, c.out.warm = b, nil, -1, 0, false
	c.answers++
	c.out.more = headerMore(len(o.data), c.answers)
	if !head {
		c.out.body = o.data
		if f, ok := c.h.s.diskFile(rq, o, now); ok {
			defer f.release()
			c.out.fd = f.fd
			c.out.warm = now.UnixNano()-f.sentAt.Load() < int64(warmFileWindow)
			defer func() {
				if c.out.err == nil && c.out.sent == len(c.out.hdr)+len(c.out.body) {
					f.sentAt.Store(now.UnixNano())
				}
			}()
		}
	}
	_, err := c.write()
	return err
}

// warmFileWindow: a disk-tier file sent whole within this long is taken to
// be in the page cache, and sent by a raw sendfile (hitWrite).
const warmFileWindow = 10 * time.Second

// write writes c.out: through the counted connection's ReadFrom, which
// hands hitWrite.WriteTo the TCP connection.
func (c *hitConn) write() (int64, error) {
	if c.rf != nil {
		return c.rf.ReadFrom(&c.out)
	}
	return c.out.WriteTo(c.c)
}

// writeError answers a request with err, through writeError, and
// returns when it finished writing.
func (c *hitConn) writeError(err error, method string, start time.Time) (time.Time, error) {
	rec := newBufferedResponse()
	writeError(rec, err)
	c.h.s.m.http.done(rec.code, method, start)
	err = c.writeBuffered(rec, method == http.MethodHead, start)
	return time.Now(), err
}

// writeBuffered writes a response a handler wrote into rec (for HEAD,
// without its body, as net/http does).
func (c *hitConn) writeBuffered(rec *bufferedResponse, head bool, now time.Time) error {
	b := append(c.hdr[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(rec.code), 10)
	b = append(append(append(b, ' '), http.StatusText(rec.code)...), "\r\n"...)
	rec.h.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	rec.h["X-Content-Type-Options"] = nosniffValue
	w := bytes.NewBuffer(b)
	rec.h.Write(w)
	w.Write(c.h.dateLine(now))
	w.WriteString("\r\n")
	c.hdr = w.Bytes()
	c.out.hdr, c.out.body, c.out.fd, c.out.sent = c.hdr, rec.body.Bytes(), -1, 0
	if head {
		c.out.body = nil
	}
	_, err := c.write()
	return err
}

// drop closes a connection the hit path is done with.
func (c *hitConn) drop() {
	c.h.untrack(c)
	c.c.Close()
}

// handOff gives the connection, with what was read of it, to net/http.
func (c *hitConn) handOff() {
	c.h.untrack(c)
	c.c.SetReadDeadline(time.Time{}) // net/http sets its own
	c.out.clearDeadline()
	hc := &handoffConn{Conn: c.c, br: c.br, dl: sendDeadline{timeout: c.h.send}}
	hc.admitted.Store(c.admitted)
	if !c.h.handoff.give(hc) {
		c.c.Close()
	}
}

func (h *hitServer) untrack(c *hitConn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// hitHead is a parsed request head (slices of the connection's buffer).
type hitHead struct {
	head           bool // HEAD, else GET
	rest           []byte
	query          []byte // nil without '?'
	business, user []byte // the first of each header
	accept         [4][]byte
	accepts        int
}

// parseHitHead parses a request head the hit path can answer: GET or
// HEAD of /m/... in HTTP/1.1, with exactly one Host, none of the headers
// that change the answer or the connection (Range, conditionals, a body,
// Expect, Upgrade, Connection other than keep-alive), every line well
// formed. Anything else is not ok: net/http reads it, and answers or
// refuses it as it always did. Headers it does not name are ignored, as
// serveHTTP ignores them.
func parseHitHead(b []byte) (hitHead, bool) {
	var h hitHead
	line, b, _ := bytes.Cut(b, crlf)
	switch {
	case bytes.HasPrefix(line, []byte("GET /m/")):
		line = line[len("GET /m/"):]
	case bytes.HasPrefix(line, []byte("HEAD /m/")):
		line, h.head = line[len("HEAD /m/"):], true
	default:
		return h, false
	}
	target, ok := bytes.CutSuffix(line, []byte(" HTTP/1.1"))
	if !ok {
		return h, false
	}
	path, query, hasQuery := bytes.Cut(target, []byte("?"))
	if !pathChars.all(path) || hasQuery && !queryChars.all(query) {
		return h, false
	}
	h.rest = path
	if hasQuery {
		h.query = query
	}
	hosts := 0
	for {
		line, b, _ = bytes.Cut(b, crlf)
		if len(line) == 0 {
			break // the blank line ending the head
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || !tokenChars.all(name) {
			return h, false // also a folded line (leading space)
		}
		value = bytes.Trim(value, " \t")
		if !valueBytes(value) {
			return h, false
		}
		var lower [24]byte
		if len(name) > len(lower) {
			continue // none of the names below
		}
		for i, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		switch string(lower[:len(name)]) {
		case "host":
			if hosts++; len(value) == 0 || !hostChars.all(value) {
				return h, false
			}
		case "accept":
			if h.accepts == len(h.accept) {
				return h, false
			}
			h.accept[h.accepts] = value
			h.accepts++
		case "willow-business":
			if h.business == nil {
				h.business = value
			}
		case "willow-user":
			if h.user == nil {
				h.user = value
			}
		case "connection":
			if !bytes.EqualFold(value, []byte("keep-alive")) {
				return h, false
			}
		case "range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
			"content-length", "transfer-encoding", "expect", "upgrade", "te", "trailer":
			return h, false
		}
	}
	return h, hosts == 1
}

var crlf = []byte("\r\n")

// charset is a set of bytes: letters, digits and some others.
type charset [256]bool

func newCharset(others string) *charset {
	var cs charset
	for c := range 256 {
		cs[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(others, byte(c)) >= 0
	}
	return &cs
}

// all reports whether every byte of b is in the set.
func (cs *charset) all(b []byte) bool {
	for _, c := range b {
		if !cs[c] {
			return false
		}
	}
	return true
}

// The bytes the hit path takes (read-only).
var (
	// pathChars: media IDs, variants and '/'; no escapes, so the path is
	// what net/http's URL.Path would be.
	pathChars = newCharset("._-/")
	// queryChars: what a signed URL's query holds (url.QueryEscape).
	queryChars = newCharset("-._~%=&+")
	// tokenChars: an HTTP token (RFC 9110 section 5.6.2).
	tokenChars = newCharset("!#$%&'*+-.^_`|~")
	// hostChars: a host and optional port, bracketed IPv6 included.
	hostChars = newCharset(".-_:[]")
)

// valueBytes: a field value without control characters (HTAB allowed).
func valueBytes(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// hitWrite is one response of the hit path: the header, then the body
// from memory (fd < 0: one writev of both) or from the disk tier's file fd
// (the header sent first, with MSG_MORE when headerMore says so that it
// shares a segment with the body, then sendfile(2)). WriteTo is called by the counted connection's
// ReadFrom with the TCP connection.
//
// The socket calls are raw system calls (no entersyscall): the socket is
// non-blocking, so they return at once (EAGAIN when the socket is full,
// and then the connection waits in the poller as any Go write does).
// Through the runtime's Syscall each of them would, when the process had
// been idle, wake the runtime's sysmon thread, and a sendfile longer than
// 20 us could have its P handed to another thread while it ran
// (BENCHMARKS.md, Edge cache 2, session 11). A sendfile can block,
// though, reading the file when its pages are not in the page cache, and
// a raw call would hold its P (and a stop of the world) as long; so the
// sendfile is raw only when the file is warm (sent whole within
// warmFileWindow), else through Syscall. A hitWrite belongs to one
// connection, whose raw connection it keeps. net/http's disk-tier answers
// send their body through one too (fileBody.WriteTo: no header, never
// warm).
type hitWrite struct {
	hdr, body []byte
	fd        int
	warm      bool // fd's pages are taken to be in the page cache
	more      bool // the header is sent with MSG_MORE (headerMore)
	sent      int  // of hdr, then of body, by send
	err       error
	w         io.Writer       // the writer rc is of
	rc        syscall.RawConn // w's
	sendf     func(uintptr) bool
	iov       [2]syscall.Iovec
	conn      deadliner    // w's, for the send timeout
	dl        sendDeadline // w's write deadline, armed when a send must wait
}

// Read reads the response from memory (for a copy that does not use
// WriteTo).
func (o *hitWrite) Read(p []byte) (int, error) {
	n := 0
	if o.sent < len(o.hdr) {
		n = copy(p, o.hdr[o.sent:])
	}
	if b := o.sent + n - len(o.hdr); b >= 0 {
		n += copy(p[n:], o.body[b:])
	}
	o.sent += n
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo writes the response to w: a *net.TCPConn, or any writer (then
// from memory).
func (o *hitWrite) WriteTo(w io.Writer) (int64, error) {
	o.sent, o.err = 0, nil
	if err := o.bind(w); err != nil {
		return 0, err
	}
	o.clearDeadline() // a raw write fails at once on an expired deadline
	o.dl.mark = -1
	return o.sendRest()
}

// bind makes w the writer o sends to (its raw connection kept while w
// stays the same).
func (o *hitWrite) bind(w io.Writer) error {
	if o.w == w {
		return nil
	}
	o.w, o.rc = w, nil
	o.conn, _ = w.(deadliner)
	if sc, ok := w.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err != nil {
			return err
		}
		o.rc = rc
	}
	if o.sendf == nil {
		o.sendf = o.send
	}
	return nil
}

// sendRest sends what is left of the response from o.sent on to the
// writer bound, and returns the bytes it sent.
func (o *hitWrite) sendRest() (int64, error) {
	from := o.sent
	if o.rc == nil {
		var bufs net.Buffers
		if o.sent < len(o.hdr) {
			bufs = append(bufs, o.hdr[o.sent:])
		}
		bufs = append(bufs, o.body[max(o.sent-len(o.hdr), 0):])
		n, err := bufs.WriteTo(o.w)
		o.sent += int(n)
		return n, err
	}
	if err := o.rc.Write(o.sendf); err != nil {
		return int64(o.sent - from), err
	}
	return int64(o.sent - from), o.err
}

// send is rc.Write's function: false means wait until the socket is
// writable and call again.
func (o *hitWrite) send(sock uintptr) bool {
	total := len(o.hdr) + len(o.body)
	for o.sent < total {
		var n uintptr
		var errno syscall.Errno
		switch {
		case o.fd < 0:
			// From memory: what is left of the header and the body in
			// one writev.
			iov := o.iov[:0]
			if o.sent < len(o.hdr) {
				iov = append(iov, iovec(o.hdr[o.sent:]))
			}
			if b := max(o.sent-len(o.hdr), 0); b < len(o.body) {
				iov = append(iov, iovec(o.body[b:]))
			}
			n, _, errno = syscall.RawSyscall(syscall.SYS_WRITEV, sock, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		case o.sent < len(o.hdr):
			h := o.hdr[o.sent:]
			var more uintptr
			if o.more {
				more = syscall.MSG_MORE
			}
			n, _, errno = syscall.RawSyscall6(syscall.SYS_SENDTO, sock, uintptr(unsafe.Pointer(&h[0])), uintptr(len(h)), more, 0, 0)
		default:
			off := int64(o.sent - len(o.hdr))
			if o.warm {
				n, _, errno = syscall.RawSyscall6(syscall.SYS_SENDFILE, sock, uintptr(o.fd), uintptr(unsafe.Pointer(&off)), uintptr(total-o.sent), 0, 0)
			} else {
				n, _, errno = syscall.Syscall6(syscall.SYS_SENDFILE, sock, uintptr(o.fd), uintptr(unsafe.Pointer(&off)), uintptr(total-o.sent), 0, 0)
			}
			if errno == 0 && n == 0 {
				o.err = io.ErrUnexpectedEOF // the file is shorter than the object
				return true
			}
		}
		switch errno {
		case 0:
			o.sent += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			o.dl.waiting(o.conn, o.sent) // the wait ends at the send timeout
			return false
		default:
			o.err = os.NewSyscallError("write", errno)
			return true
		}
	}
	return true
}

// clearDeadline removes the write deadline a send armed, if any.
func (o *hitWrite) clearDeadline() {
	if o.conn != nil {
		o.dl.clear(o.conn)
	}
}

// headerMoreMinBytes: a sendfile's header is sent with MSG_MORE (held to
// share a segment with the body) for bodies of at least this many bytes,
// else on its own, as nginx without tcp_nopush sends it. With MSG_MORE a
// 100 KiB hit cost 35-36 µs on new connections against 26-27 without
// (24 and 26-30 with persistent ones); a 1 MiB hit on persistent
// connections was served 1.2-1.5 times as fast with it (BENCHMARKS.md,
// Edge cache 2, session 11).
//
// headerMoreAfter: not on a connection's first answers, though. On a
// young connection (TCP slow start, a small congestion window) the
// held header delayed the whole 1 MiB answer: with new connections the
// edge served 93-98% of nginx's req/s with MSG_MORE on every 1 MiB
// header, 101-102% with it never, 102-107% from the ninth answer on
// (BENCHMARKS.md, Edge cache 2, session 13).
const (
	headerMoreMinBytes = 512 << 10
	headerMoreAfter    = 8
)

// headerMore reports whether a sendfile answer with a body of n bytes,
// the connection's answer-th, sends its header with MSG_MORE.
func headerMore(n, answer int) bool {
	return n >= headerMoreMinBytes && answer > headerMoreAfter
}

// iovec is b as a writev vector (b not empty).
func iovec(b []byte) syscall.Iovec {
	v := syscall.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}

// bufferedResponse is an http.ResponseWriter that keeps what a handler
// writes (writeError's small answers), for the hit path to send.
type bufferedResponse struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func newBufferedResponse() *bufferedResponse { return &bufferedResponse{h: http.Header{}} }

func (r *bufferedResponse) Header() http.Header { return r.h }

func (r *bufferedResponse) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *bufferedResponse) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// handoffListener is the listener net/http serves: the connections the
// hit path hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to net/http; false when it no longer serves.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// handoffConn is a connection handed to net/http: its reads return what
// the hit path had read first.
type handoffConn struct {
	net.Conn
	mu       sync.Mutex // guards br
	br       *bufio.Reader
	admitted atomic.Bool  // its first request was admitted by the hit path
	dl       sendDeadline // the send timeout of net/http's writes (sendtimeout.go)
}

type handoffKey struct{}

// admittedByHitPath reports whether the request of ctx is the first one
// of a connection the hit path handed over after admitting it (true once
// per such connection).
func admittedByHitPath(ctx context.Context) bool {
	hc, ok := ctx.Value(handoffKey{}).(*handoffConn)
	return ok && hc.admitted.CompareAndSwap(true, false)
}

func (c *handoffConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	br := c.br
	if br != nil && br.Buffered() == 0 {
		c.br, br = nil, nil
	}
	c.mu.Unlock()
	if br != nil {
		return br.Read(p)
	}
	return c.Conn.Read(p)
}

// NetConn returns the accepted connection (for connContext).
func (c *handoffConn) NetConn() net.Conn { return c.Conn }
