package master

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"willow/auth"
	"willow/internal/testenv"
	"willow/node"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// healthServer serves gRPC health checks on l (with hs unless nil: then
// no health service) until the test ends or stop is called.
func healthServer(t *testing.T, l net.Listener, hs *grpchealth.Server, opts ...grpc.ServerOption) (stop func()) {
	t.Helper()
	s := grpc.NewServer(opts...)
	if hs != nil {
		healthpb.RegisterHealthServer(s, hs)
	}
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return s.Stop
}

func probeOnce(p *h2Prober, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Probe(ctx, addr)
}

// TestH2Prober: the prober's health Check answers as gRPC's: SERVING is
// nil, NOT_SERVING and a server without the health service are errors,
// over one connection kept between probes; a probe reads past the
// connection's flow-control window (it returns what it reads); a
// connection the server closed is dialled again within the probe; an
// address where nothing listens, or where nothing answers, fails.
func TestH2Prober(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	addr := l.Addr().String()
	hs := grpchealth.NewServer()
	stop := healthServer(t, cl, hs)
	p := newH2Prober(nil)
	defer p.Close()

	for i := range 3 {
		if err := probeOnce(p, addr, 2*time.Second); err != nil {
			t.Fatalf("probe %d of a serving node: %v", i, err)
		}
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := probeOnce(p, addr, 2*time.Second); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("probe of a node not serving: %v, want NOT_SERVING", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	// Each answer's DATA counts against the connection's 64 KB window:
	// ~9400 answers exhaust it unless the prober returns the bytes.
	start := time.Now()
	for i := range 10000 {
		if err := probeOnce(p, addr, 5*time.Second); err != nil {
			t.Fatalf("probe %d on one connection: %v", i, err)
		}
	}
	t.Logf("10000 probes in %v", time.Since(start))
	if n := cl.n.Load(); n != 1 {
		t.Fatalf("%d connections for one address, want 1 (kept between probes)", n)
	}

	// The server restarts on the same address between probes: the
	// cached connection is dead, the probe dials again and passes.
	stop()
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen again on %s: %v", addr, err)
	}
	cl2 := &countingListener{Listener: l2}
	stop2 := healthServer(t, cl2, grpchealth.NewServer())
	if err := probeOnce(p, addr, 2*time.Second); err != nil {
		t.Fatalf("probe of a restarted server: %v", err)
	}
	if n := cl2.n.Load(); n != 1 {
		t.Fatalf("%d connections to the restarted server, want 1", n)
	}
	// The server goes away: the probe fails, and its connection is not kept.
	stop2()
	if err := probeOnce(p, addr, time.Second); err == nil {
		t.Fatal("probe of a stopped server passed")
	}
	p.mu.Lock()
	_, kept := p.conns[addr]
	p.mu.Unlock()
	if kept {
		t.Fatal("connection of a failed probe kept")
	}

	// No health service: gRPC's Unimplemented.
	l3, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthServer(t, l3, nil)
	if err := probeOnce(p, l3.Addr().String(), 2*time.Second); err == nil || !strings.Contains(err.Error(), "Unimplemented") {
		t.Fatalf("probe of a server without the health service: %v, want Unimplemented", err)
	}

	// Nothing listening.
	l4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l4.Addr().String()
	l4.Close()
	if err := probeOnce(p, gone, time.Second); err == nil {
		t.Fatal("probe of an address nobody listens on passed")
	}

	// A listener that accepts and never answers: the probe ends at its
	// deadline, and its connection is not kept.
	l5, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l5.Close()
	go func() {
		for {
			c, err := l5.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	start = time.Now()
	if err := probeOnce(p, l5.Addr().String(), 200*time.Millisecond); err == nil {
		t.Fatal("probe of a silent listener passed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("probe of a silent listener took %v, want about its 200 ms deadline", d)
	}
	p.mu.Lock()
	_, kept = p.conns[l5.Addr().String()]
	p.mu.Unlock()
	if kept {
		t.Fatal("connection of a probe that timed out kept")
	}

	// retain closes the connections to addresses no longer probed.
	p.retain(map[string]bool{})
	p.mu.Lock()
	n := len(p.conns)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections kept after retain(nothing)", n)
	}
}

// TestH2ProberTLS: over TLS (ALPN h2, the address's host as server
// name) as gRPC's TLS credentials dial.
func TestH2ProberTLS(t *testing.T) {
	certFile, keyFile, pool := testenv.SelfSignedCert(t, t.TempDir(), "node")
	creds, err := credentials.NewServerTLSFromFile(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthServer(t, l, grpchealth.NewServer(), grpc.Creds(creds))
	p := newH2Prober(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	defer p.Close()
	for i := range 3 {
		if err := probeOnce(p, l.Addr().String(), 2*time.Second); err != nil {
			t.Fatalf("TLS probe %d: %v", i, err)
		}
	}
	// A prober that does not trust the node's certificate fails.
	q := newH2Prober(&tls.Config{MinVersion: tls.VersionTLS12})
	defer q.Close()
	if err := probeOnce(q, l.Addr().String(), 2*time.Second); err == nil {
		t.Fatal("TLS probe with an untrusted certificate passed")
	}
}

// TestH2ProberWillowNode: a Willow node with node auth over mutual TLS
// (the mains' LoadTLS configs) answers the master's probe: the health
// service is public, and the prober presents the node's client
// certificate.
func TestH2ProberWillowNode(t *testing.T) {
	certFile, keyFile, _ := testenv.SelfSignedCert(t, t.TempDir(), "node")
	srvTLS, cliTLS, err := node.LoadTLS(certFile, keyFile, certFile)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", Logger: slog.New(slog.DiscardHandler),
		TLS: srvTLS, ClientTLS: cliTLS, Auth: &auth.Config{ClusterSecret: "probe-test-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	p := newH2Prober(cliTLS)
	defer p.Close()
	var last error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if last = probeOnce(p, n.Addr(), time.Second); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("probe of a Willow node (mTLS, node auth): %v", last)
	}
	// Without a client certificate the node refuses the connection.
	q := newH2Prober(&tls.Config{RootCAs: cliTLS.RootCAs, MinVersion: tls.VersionTLS12})
	defer q.Close()
	if err := probeOnce(q, n.Addr(), time.Second); err == nil {
		t.Fatal("probe without the client certificate passed")
	}
}
