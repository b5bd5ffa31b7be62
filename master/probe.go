package master

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"willow/internal/iostat"
)

// Prober health-checks a node at its gRPC address. It returns nil when
// the node answers SERVING.
type Prober interface {
	Probe(ctx context.Context, addr string) error
}

// h2Prober probes with the standard gRPC health Check (the server's
// overall status, grpc.health.v1.Health/Check), spoken over HTTP/2 on
// one cached connection per address, without a grpc.ClientConn: between
// probes a connection is a socket and its HPACK tables, with no
// goroutine and no buffers (a ClientConn is a reader, a writer and three
// callback serializers, and a 32 KB read buffer: at N = 5000 the
// prober's 5000 of them were 25 000 of the master's 35 000 goroutines,
// and their read buffers 176 of its 329 MB of heap in use). A probe
// owns its connection while it runs: it writes its request and reads
// frames until its stream ends, answering the server's SETTINGS and
// PINGs and returning the DATA bytes it read to the connection's
// flow-control window. What the server sent after
// the stream's end (in the same read) is kept for the next probe.
//
// A probe passes only when the address answers SERVING on a connection,
// as with a ClientConn. A cached connection found broken before the
// server took the request (closed, reset, or refused by GOAWAY or
// REFUSED_STREAM) is dialled again once within the probe, as a gRPC
// channel reconnects; a connection whose probe failed any other way, or
// ran out of time, is closed, and the next probe dials a new one.
type h2Prober struct {
	tls   *tls.Config // nil: plain TCP (h2c)
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	mu    sync.Mutex         // guards conns
	conns map[string]*h2Conn // idle connections, by address
}

var _ Prober = (*h2Prober)(nil)

func newH2Prober(tlsCfg *tls.Config) *h2Prober {
	// The probes' bytes count as this process's outgoing traffic
	// (package iostat), as every connection node.Dial makes.
	return &h2Prober{tls: tlsCfg, dial: iostat.Dial(nil), conns: map[string]*h2Conn{}}
}

// h2Conn is one probe connection: the socket and the HTTP/2 state that
// outlives a probe.
type h2Conn struct {
	c       net.Conn
	scheme  string
	enc     *hpack.Encoder // request headers; its dynamic table is the connection's
	encBuf  bytes.Buffer
	dec     *hpack.Decoder // response headers
	next    uint32         // the next stream ID (odd)
	sendWin int64          // the connection's send window (DATA we may still send)
	unacked uint32         // DATA bytes read and not yet returned by WINDOW_UPDATE
	left    []byte         // bytes read past the last probe's stream: the next frames' start
	dead    bool           // GOAWAY seen, or stream IDs used up: do not reuse
}

// Probe implements Prober.
func (p *h2Prober) Probe(ctx context.Context, addr string) error {
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		hc, cached := p.conns[addr]
		delete(p.conns, addr) // this probe's while it runs
		p.mu.Unlock()
		if !cached {
			var err error
			if hc, err = p.connect(ctx, addr); err != nil {
				return fmt.Errorf("health check %s: %w", addr, err)
			}
		}
		keep, stale, err := hc.check(ctx, addr)
		if !keep || hc.dead {
			hc.c.Close()
		} else {
			p.mu.Lock()
			if _, ok := p.conns[addr]; ok {
				hc.c.Close() // another probe of the address cached one meanwhile
			} else {
				p.conns[addr] = hc
			}
			p.mu.Unlock()
		}
		if stale && cached && attempt == 0 && ctx.Err() == nil {
			continue // the cached connection had broken: once more on a new one
		}
		if err != nil {
			return fmt.Errorf("health check %s: %w", addr, err)
		}
		return nil
	}
}

// connect dials addr (TLS with ALPN h2 when the prober has a TLS config,
// the host as server name unless the config names one, as gRPC's TLS
// credentials do) and writes the client preface and SETTINGS.
func (p *h2Prober) connect(ctx context.Context, addr string) (*h2Conn, error) {
	c, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if p.tls != nil {
		cfg := p.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol != "h2" {
			c.Close()
			return nil, errors.New("server did not negotiate h2")
		}
		c, scheme = tc, "https"
	}
	hc := &h2Conn{c: c, scheme: scheme, next: 1, sendWin: 65535, dec: hpack.NewDecoder(4096, nil)}
	hc.enc = hpack.NewEncoder(&hc.encBuf)
	var w bytes.Buffer
	w.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&w, nil)
	if err := fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	_, err = c.Write(w.Bytes())
	_ = c.SetWriteDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, err
	}
	return hc, nil
}

// Limits of what a probe reads: a health answer is a few bytes.
const (
	probeMaxFrame   = 16 << 10 // SETTINGS_MAX_FRAME_SIZE's default, which the prober does not raise
	probeMaxHeaders = 16 << 10
	probeMaxMessage = 1 << 10
	// probeWindowAck: DATA bytes read before the prober returns them to
	// the connection's window (at least every this many).
	probeWindowAck = 16 << 10
)

// probeRequest is the Check request's gRPC message: uncompressed, length
// 0 (an empty HealthCheckRequest: the server's overall status).
var probeRequest = []byte{0, 0, 0, 0, 0}

// probeReaders are the probes' read buffers, used only while a probe
// runs.
var probeReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// errProbeStale: the connection broke before the server took the
// request.
var errProbeStale = errors.New("connection closed before the request was taken")

// check makes one health Check on hc. keep says whether hc can serve
// the next probe; stale whether the connection had broken before the
// server took the request (Probe dials again).
func (hc *h2Conn) check(ctx context.Context, addr string) (keep, stale bool, err error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = hc.c.SetDeadline(dl)
	}
	// A probe whose context ends unblocks at once: the connection is
	// then closed (its state mid-stream is unknown).
	stop := context.AfterFunc(ctx, func() { _ = hc.c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && ctx.Err() != nil {
			keep = false
		}
		if keep {
			_ = hc.c.SetDeadline(time.Time{})
		}
	}()

	id := hc.next
	hc.next += 2
	if hc.next >= 1<<31-1 {
		hc.dead = true // stream IDs used up: the next probe dials a new connection
	}
	if hc.sendWin < int64(len(probeRequest)) {
		// The server has not returned the window (a conforming gRPC
		// server does as it reads): start over on a new connection.
		return false, true, errors.New("connection send window exhausted")
	}
	var w bytes.Buffer
	lr := bytes.NewReader(hc.left)
	br := probeReaders.Get().(*bufio.Reader)
	br.Reset(io.MultiReader(lr, hc.c))
	defer func() {
		// What the server sent after this stream's end stays the
		// connection's.
		hc.left = nil
		if keep {
			if n := br.Buffered(); n > 0 || lr.Len() > 0 {
				b, _ := br.Peek(n)
				rest := make([]byte, lr.Len())
				_, _ = lr.Read(rest)
				hc.left = append(append([]byte(nil), b...), rest...)
			}
		}
		br.Reset(nil)
		probeReaders.Put(br)
	}()
	fr := http2.NewFramer(&w, br)
	fr.SetMaxReadFrameSize(probeMaxFrame)
	fr.MaxHeaderListSize = probeMaxHeaders
	fr.ReadMetaHeaders = hc.dec
	flush := func() error {
		if w.Len() == 0 {
			return nil
		}
		_, err := hc.c.Write(w.Bytes())
		w.Reset()
		return err
	}

	hc.encBuf.Reset()
	field := func(k, v string) { _ = hc.enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	field(":method", "POST")
	field(":scheme", hc.scheme)
	field(":path", "/grpc.health.v1.Health/Check")
	field(":authority", addr)
	field("content-type", "application/grpc")
	field("te", "trailers")
	if dl, ok := ctx.Deadline(); ok {
		field("grpc-timeout", strconv.FormatInt(max(time.Until(dl).Microseconds(), 1), 10)+"u")
	}
	field("user-agent", "willow-master-probe")
	if hc.unacked > 0 {
		_ = fr.WriteWindowUpdate(0, hc.unacked)
		hc.unacked = 0
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hc.encBuf.Bytes(), EndHeaders: true})
	_ = fr.WriteData(id, true, probeRequest)
	hc.sendWin -= int64(len(probeRequest))
	if err := flush(); err != nil {
		return false, !isTimeout(err), err
	}

	var (
		got                     bool // a frame of this stream was read
		httpStatus, grpcStatus  string
		grpcMessage             string
		sawGRPCStatus, finished bool
		msg                     []byte
	)
	for !finished {
		f, err := fr.ReadFrame()
		if err != nil {
			return false, !got && !isTimeout(err), err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				break
			}
			_ = f.ForeachSetting(func(s http2.Setting) error {
				if s.ID == http2.SettingHeaderTableSize {
					hc.enc.SetMaxDynamicTableSizeLimit(s.Val)
				}
				return nil
			})
			_ = fr.WriteSettingsAck()
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				hc.sendWin += int64(f.Increment)
			}
		case *http2.GoAwayFrame:
			hc.dead = true
			if f.LastStreamID < id {
				return false, true, errProbeStale
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				refused := f.ErrCode == http2.ErrCodeRefusedStream
				return !refused, refused, fmt.Errorf("stream reset: %v", f.ErrCode)
			}
		case *http2.DataFrame:
			hc.unacked += f.Length // padding included: it counts against the window
			if f.StreamID != id {
				break // an earlier probe's, which gave up on its stream
			}
			got = true
			if len(msg)+len(f.Data()) > probeMaxMessage {
				return false, false, errors.New("health answer too large")
			}
			msg = append(msg, f.Data()...)
			finished = f.StreamEnded()
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				break
			}
			got = true
			for _, hf := range f.Fields {
				switch hf.Name {
				case ":status":
					httpStatus = hf.Value
				case "grpc-status":
					grpcStatus, sawGRPCStatus = hf.Value, true
				case "grpc-message":
					grpcMessage = hf.Value
				}
			}
			finished = f.StreamEnded()
		}
		if err := flush(); err != nil {
			return false, !got && !isTimeout(err), err
		}
	}
	if hc.unacked >= probeWindowAck {
		_ = fr.WriteWindowUpdate(0, hc.unacked)
		hc.unacked = 0
		if err := flush(); err != nil {
			return false, false, err
		}
	}
	switch {
	case httpStatus != "200":
		return false, false, fmt.Errorf("HTTP status %q", httpStatus)
	case !sawGRPCStatus:
		return false, false, errors.New("no grpc-status in the answer")
	case grpcStatus != "0":
		code, err := strconv.ParseUint(grpcStatus, 10, 32)
		if err != nil {
			return false, false, fmt.Errorf("grpc-status %q", grpcStatus)
		}
		m, err := url.PathUnescape(grpcMessage)
		if err != nil {
			m = grpcMessage
		}
		return true, false, status.Error(codes.Code(code), m)
	}
	if len(msg) < 5 || msg[0] != 0 || int(binary.BigEndian.Uint32(msg[1:5])) != len(msg)-5 {
		return false, false, errors.New("malformed health answer")
	}
	var resp healthpb.HealthCheckResponse
	if err := proto.Unmarshal(msg[5:], &resp); err != nil {
		return false, false, fmt.Errorf("health answer: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return true, false, errors.New(resp.GetStatus().String())
	}
	return true, false, nil
}

// isTimeout reports whether err is a deadline's: the probe ran out of
// time, which says nothing of whether the connection had broken.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// retain closes the idle connections to addresses not in keep.
func (p *h2Prober) retain(keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, hc := range p.conns {
		if !keep[a] {
			hc.c.Close()
			delete(p.conns, a)
		}
	}
}

// Close closes every idle connection.
func (p *h2Prober) Close() { p.retain(nil) }

// leaseScript takes or renews the leader lease: it succeeds when the key
// is free or already held by this master.
var leaseScript = redis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0`)

// lease takes or renews the leader lease.
func (s *Server) lease(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, s.ctl, []string{s.key("leader")}, s.cfg.ID, s.cfg.LeaseTTL.Milliseconds()).Int()
	return n == 1, err
}

// runLeader probes and judges nodes every ProbeInterval while this master
// holds the leader lease; other masters only take over when it lapses.
func (s *Server) runLeader(ctx context.Context) {
	t := time.NewTicker(s.cfg.ProbeInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeInterval)
		lead, err := s.lease(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("leader lease", "err", err)
		}
		s.setLeader(lead && err == nil)
		if lead && err == nil {
			if err := s.judgeOnce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("judge nodes", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			if s.isLeader() {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = releaseScript.Run(rctx, s.ctl, []string{s.key("leader")}, s.cfg.ID).Err()
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

func (s *Server) setLeader(b bool) {
	s.mu.Lock()
	changed := s.leader != b
	s.leader = b
	s.mu.Unlock()
	if changed {
		s.log.Info("master leadership", "leader", b, "id", s.cfg.ID)
		s.met.leader(b)
	}
}

func (s *Server) isLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader
}

// judgeOnce loads the registry, probes the nodes that need it, and writes
// the health judgements that changed.
func (s *Server) judgeOnce(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	v, err := s.loadView(rctx)
	cancel()
	if err != nil {
		return err
	}
	v = s.withSeen(v)
	now := s.now()
	// Right after this master starts or Redis comes back, heartbeats other
	// masters received may not be in Redis yet: judge nobody dead until
	// Redis has answered for MissedAfter.
	deadOK := s.redisUpFor() >= s.cfg.MissedAfter
	probed := s.probeAll(ctx, v.entries, now)
	changed := s.cfg.judge(v.entries, probed, now, deadOK)
	if len(changed) == 0 {
		return s.cleanDrills(ctx, now)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.writeHealth(wctx, changed); err != nil {
		return fmt.Errorf("master: write health: %w", err)
	}
	for _, e := range v.entries {
		h, ok := changed[e.info.GetId()]
		if !ok || h.State == e.h.State {
			continue
		}
		s.log.Info("node state", "id", e.info.GetId(), "role", e.info.GetRole(), "region", e.info.GetRegion(),
			"from", e.h.State, "to", h.State, "reason", h.Reason)
		s.met.transition(h)
	}
	return s.cleanDrills(ctx, now)
}

// probeSlot is the step of a probe round's pacing: the round's probes
// start in groups, one group a slot, over probeSpread of ProbeInterval.
const probeSlot = 5 * time.Millisecond

// probeSpread is the part of ProbeInterval over which a round's probes
// start: a round's 500 probes at N = 5000, started 32 at a time as fast
// as they answered, ran as one ~80 ms burst; a third of the Route calls
// over 5 ms at N = 5000 started inside a judge round, the probes and
// the rest of it (BenchmarkFleet, session 11; the master's CPU inside
// the burst was not measured).
const probeSpread = 2 // ProbeInterval / probeSpread

// probeAll health-checks every live node that is probing or out of its
// protection window, and the healthy ones whose turn it is (ProbeBudget
// of them a round, taking turns in ID order): concurrently (32 at most in
// flight), their starts paced over half of ProbeInterval, a group every
// probeSlot (5 probes a slot for 500 a round at the default 1 s).
func (s *Server) probeAll(ctx context.Context, es []*entry, now time.Time) map[string]error {
	out := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	keep := map[string]bool{}
	var healthy, others []*entry
	for _, e := range es {
		if !e.alive(now, s.cfg.MissedAfter) {
			continue
		}
		if e.h.State == StateEjected && now.UnixMilli() < e.h.ProtectUntilMs {
			continue
		}
		keep[e.info.GetAddr()] = true
		if e.h.State == "" || e.h.State == StateHealthy {
			healthy = append(healthy, e)
		} else {
			others = append(others, e)
		}
	}
	if len(healthy) > s.cfg.ProbeBudget {
		sort.Slice(healthy, func(i, j int) bool { return healthy[i].info.GetId() < healthy[j].info.GetId() })
		from := s.probeAt % len(healthy)
		turn := make([]*entry, 0, s.cfg.ProbeBudget)
		for i := range s.cfg.ProbeBudget {
			turn = append(turn, healthy[(from+i)%len(healthy)])
		}
		s.probeAt = from + s.cfg.ProbeBudget
		healthy = turn
	}
	all := append(others, healthy...)
	perSlot := len(all) // probes a slot: all at once unless paced
	if spread := s.cfg.ProbeInterval / probeSpread; spread >= 2*probeSlot && len(all) > 1 {
		slots := min(len(all), int(spread/probeSlot))
		perSlot = (len(all) + slots - 1) / slots
	}
	start := time.Now()
	for i, e := range all {
		if i > 0 && i%perSlot == 0 {
			// The next group's start (on the wall clock: s.now may be a
			// test's fixed clock).
			if d := time.Until(start.Add(time.Duration(i/perSlot) * probeSlot)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
				case <-t.C:
				}
			}
			if ctx.Err() != nil {
				break // the rest are not probed this round (no judgement of them)
			}
		}
		addr := e.info.GetAddr()
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
			err := s.prober.Probe(pctx, addr)
			cancel()
			mu.Lock()
			out[id] = err
			mu.Unlock()
		}(e.info.GetId())
	}
	wg.Wait()
	if p, ok := s.prober.(interface{ retain(map[string]bool) }); ok {
		p.retain(keep)
	}
	return out
}

// maxEjected is how many of n live nodes of one role in one region may be
// ejected at once for bad health: floor(n × fraction), at least 1, but
// never all of them (so 0 for a lone node, 1 of 2, 1 of 3, 2 of 6 with
// the default third). Dead nodes are not counted and always leave.
func maxEjected(n int, fraction float64) int {
	if n <= 1 {
		return 0
	}
	k := int(math.Floor(float64(n)*fraction + 1e-9))
	return min(n-1, max(1, k))
}

// judge applies the ejection and recovery rules to a registry snapshot
// and the probe results of this round; it returns the health records that
// changed, by node ID. Unless deadOK, nodes without recent heartbeats are
// left as they are (Route leaves them out anyway).
func (c *Config) judge(es []*entry, probed map[string]error, now time.Time, deadOK bool) map[string]health {
	nowMs := now.UnixMilli()
	changed := map[string]health{}
	eject := func(h health, reason string, fromProbing bool) health {
		switch {
		case fromProbing:
			h.Strikes++
		case h.RecoveredMs > 0 && nowMs-h.RecoveredMs < c.FlapMemory.Milliseconds():
			h.Strikes++
		default:
			h.Strikes = 0
		}
		prot := c.Protection
		for i := 0; i < h.Strikes && prot < c.MaxProtection; i++ {
			prot *= 2
		}
		prot = min(prot, c.MaxProtection)
		h.State, h.SinceMs, h.Reason = StateEjected, nowMs, reason
		h.ProtectUntilMs = nowMs + prot.Milliseconds()
		h.ProbeOK, h.ProbeFail = 0, 0
		return h
	}
	type group struct{ live, out int }
	groups := map[string]*group{}
	type candidate struct {
		e      *entry
		h      health
		reason string
		rate   float64
	}
	var cands []candidate
	for _, e := range es {
		id := e.info.GetId()
		h := e.h
		if h.State == "" {
			h = health{State: StateHealthy, SinceMs: e.lastMs}
		}
		orig := h
		gk := e.info.GetRole() + "\x00" + e.info.GetRegion()
		if !e.alive(now, c.MissedAfter) {
			if !deadOK {
				continue
			}
			if h.State != StateEjected {
				changed[id] = eject(h, ReasonMissedHeartbeats, h.State == StateProbing)
			} else if h.ProbeOK != 0 {
				h.ProbeOK = 0
				changed[id] = h
			}
			continue
		}
		g := groups[gk]
		if g == nil {
			g = &group{}
			groups[gk] = g
		}
		g.live++
		perr, wasProbed := probed[id]
		switch h.State {
		case StateEjected:
			if nowMs >= h.ProtectUntilMs {
				h.State, h.SinceMs, h.ProbeOK = StateProbing, nowMs, 0
				if wasProbed && perr == nil {
					h.ProbeOK = 1
				}
			}
			if h.State == StateProbing && h.ProbeOK >= c.ProbeSuccesses {
				h.State, h.SinceMs, h.Reason, h.RecoveredMs = StateHealthy, nowMs, "", nowMs
			}
		case StateProbing:
			switch {
			case !wasProbed:
			case perr != nil:
				h = eject(h, ReasonProbeFailed+": "+perr.Error(), true)
			default:
				h.ProbeOK++
				if h.ProbeOK >= c.ProbeSuccesses {
					h.State, h.SinceMs, h.Reason, h.RecoveredMs, h.ProbeOK = StateHealthy, nowMs, "", nowMs, 0
				}
			}
		case StateHealthy:
			if wasProbed {
				if perr != nil {
					h.ProbeFail++
				} else {
					h.ProbeFail = 0
				}
			}
			from := max(nowMs-c.SuccessWindow.Milliseconds(), h.SinceMs)
			req, errs := window(e.samples, from)
			rate := 1.0
			if req > 0 {
				rate = float64(req-errs) / float64(req)
			}
			switch {
			case req >= c.MinRequests && rate <= c.MinSuccessRate:
				cands = append(cands, candidate{e, h, fmt.Sprintf("%s %.2f over %d requests", ReasonSuccessRate, rate, req), rate})
			case h.ProbeFail >= c.ProbeFailures:
				msg := ReasonProbeFailed
				if perr != nil {
					msg += ": " + perr.Error()
				}
				cands = append(cands, candidate{e, h, msg, 0})
			}
		}
		if h.State != StateHealthy {
			g.out++
		}
		if h != orig {
			changed[id] = h
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].rate != cands[j].rate {
			return cands[i].rate < cands[j].rate
		}
		return cands[i].e.info.GetId() < cands[j].e.info.GetId()
	})
	for _, cd := range cands {
		g := groups[cd.e.info.GetRole()+"\x00"+cd.e.info.GetRegion()]
		if g.out >= maxEjected(g.live, c.MaxEjectFraction) {
			continue // the region keeps this node: one bad judgement cannot empty it
		}
		g.out++
		changed[cd.e.info.GetId()] = eject(cd.h, cd.reason, false)
	}
	return changed
}
