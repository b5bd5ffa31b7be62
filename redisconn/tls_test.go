package redisconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"willow/internal/iostat"
	"willow/internal/redisproc"
	"willow/redisconn"
)

// TestTLSTrafficCounts runs a real redis-server on a TLS-only port: a
// rediss:// client verifies its certificate against the host it dialled
// and its bytes count in iostat, as plain redis:// traffic does.
func TestTLSTrafficCounts(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := redisproc.Start(ctx, redisproc.Options{Dir: filepath.Join(dir, "redis"), TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatalf("%v (redis-server comes from scripts/setup.sh)", err)
	}
	defer p.Stop()
	if !strings.HasPrefix(p.URL, "rediss://") {
		t.Fatalf("URL %q, want rediss://", p.URL)
	}

	// An untrusted certificate is refused.
	c, err := redisconn.Open(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("ping with an unknown CA: %v, want a certificate error", err)
	}
	c.Close()

	c, err = redisconn.Open(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*redis.Client).Options().TLSConfig.RootCAs = pool
	out0, in0 := iostat.DialedOut(), iostat.DialedIn()
	value := strings.Repeat("w", 64<<10)
	if err := c.Set(ctx, "k", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != value {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	// Closing flushes the counters a connection batches.
	c.Close()
	if out := iostat.DialedOut() - out0; out < int64(len(value)) {
		t.Errorf("counted %d bytes out, want at least %d", out, len(value))
	}
	if in := iostat.DialedIn() - in0; in < int64(len(value)) {
		t.Errorf("counted %d bytes in, want at least %d", in, len(value))
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir
// and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "willow test redis"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, pool
}
