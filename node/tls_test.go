package node_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"willow/internal/testenv"
	"willow/node"
)

// certFor is testenv.SelfSignedCert without the pool.
func certFor(t *testing.T, dir, name string) (certFile, keyFile string) {
	certFile, keyFile, _ = testenv.SelfSignedCert(t, dir, name)
	return certFile, keyFile
}

func startTLSNode(t *testing.T, cert, key, ca string) string {
	t.Helper()
	srv, _, err := node.LoadTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{ID: "tls-1", Role: "upload", Region: "a", TLS: srv,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n.Addr()
}

func healthCheck(addr string, cfg *tls.Config) error {
	conn, err := node.Dial(addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return errors.New(resp.GetStatus().String())
	}
	return nil
}

func TestTLSHealth(t *testing.T) {
	dir := t.TempDir()
	cert, key := certFor(t, dir, "node")
	otherCert, otherKey := certFor(t, dir, "other")
	load := func(c, k, ca string) *tls.Config {
		_, cl, err := node.LoadTLS(c, k, ca)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	serverOnly := startTLSNode(t, cert, key, "")
	mutual := startTLSNode(t, cert, key, cert)
	for _, tc := range []struct {
		name   string
		addr   string
		client *tls.Config
		ok     bool
	}{
		{"tls client trusting the cert", serverOnly, load("", "", cert), true},
		{"plaintext client refused", serverOnly, nil, false},
		{"tls client not trusting the cert", serverOnly, load("", "", otherCert), false},
		{"mutual tls with a client cert", mutual, load(cert, key, cert), true},
		{"mutual tls without a client cert", mutual, load("", "", cert), false},
		{"mutual tls with an untrusted client cert", mutual, load(otherCert, otherKey, cert), false},
		{"plaintext client refused by mutual tls", mutual, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := healthCheck(tc.addr, tc.client)
			if (err == nil) != tc.ok {
				t.Fatalf("health = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := certFor(t, dir, "node")
	for _, tc := range []struct {
		name                string
		cert, key, ca       string
		wantServer, wantCli bool
		wantErr             bool
	}{
		{name: "none"},
		{name: "cert and key", cert: cert, key: key, wantServer: true, wantCli: true},
		{name: "ca only", ca: cert, wantCli: true},
		{name: "cert without key", cert: cert, wantErr: true},
		{name: "missing ca", cert: cert, key: key, ca: filepath.Join(dir, "nope"), wantErr: true},
		{name: "ca not pem", cert: cert, key: key, ca: key, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli, err := node.LoadTLS(tc.cert, tc.key, tc.ca)
			if (err != nil) != tc.wantErr || (srv != nil) != tc.wantServer || (cli != nil) != tc.wantCli {
				t.Fatalf("LoadTLS = %v, %v, %v", srv != nil, cli != nil, err)
			}
		})
	}
}

// TestDialSeveralMasters: a comma-separated address list fails over to
// the next address when the first does not answer.
func TestDialSeveralAddresses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	live := startTLSNode(t, "", "", "")
	if err := healthCheck(dead+","+live, nil); err != nil {
		t.Fatalf("health via %s,%s: %v", dead, live, err)
	}
}
