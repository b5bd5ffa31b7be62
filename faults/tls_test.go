package faults_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"willow/internal/testenv"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 that is also
// its own CA.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "willow-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTLSMains runs the real master and compress binaries with
// -tls-cert -tls-key -tls-ca (mutual TLS): the worker registers over TLS,
// the master's probes keep it healthy, and clients without a certificate
// or without TLS are refused.
func TestTLSMains(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/master", "./cmd/compress")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cert, key := selfSigned(t, dir)
	rds := testenv.StartRedis(t)
	tlsFlags := []string{"-tls-cert", cert, "-tls-key", key, "-tls-ca", cert}
	masterAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	run := func(name string, args ...string) {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(bin, name), append(args, tlsFlags...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("--- %s log:\n%s", name, b)
			}
		})
	}
	run("master", "-id", "master-1", "-grpc", masterAddr, "-redis", rds.URL, "-oncall-token", "t")
	run("compress", "-id", "compress-a-1", "-region", "a", "-grpc", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"-master", masterAddr, "-store", filepath.Join(dir, "store"), "-workers", "1")

	_, mutual, err := node.LoadTLS(cert, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	_, noCert, err := node.LoadTLS("", "", cert)
	if err != nil {
		t.Fatal(err)
	}
	list := func(cfg *tls.Config) (map[string]string, error) {
		conn, err := node.Dial(masterAddr, cfg)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := willowv1.NewMasterClient(conn).ListNodes(ctx, &willowv1.ListNodesRequest{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, n := range resp.GetNodes() {
			out[n.GetNode().GetId()] = n.GetState()
		}
		return out, nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ns, err := list(mutual)
		if err == nil && ns["compress-a-1"] == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("compress-a-1 not healthy over mutual TLS: %v %v", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Healthy through several probe rounds (the master probes over TLS).
	time.Sleep(3 * time.Second)
	if ns, err := list(mutual); err != nil || ns["compress-a-1"] != "healthy" {
		t.Fatalf("after 3 s of probes: %v %v", ns, err)
	}
	for name, cfg := range map[string]*tls.Config{"plaintext": nil, "tls without a client certificate": noCert} {
		if _, err := list(cfg); err == nil {
			t.Errorf("%s client was served", name)
		}
	}
}
