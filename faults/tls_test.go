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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
)

// testCA is a throwaway certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its PEM certificate: the -tls-ca bundle
}

func newCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "willow-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, file: file}
}

// issue writes a node certificate for 127.0.0.1 naming the node as
// docs/security.md says: CN the node ID, OU its role.
func (ca *testCA) issue(t *testing.T, dir, id, role string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: id, OrganizationalUnit: []string{role}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, id+"-"+role+".crt"), filepath.Join(dir, id+"-"+role+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTLSMains runs the real master and compress binaries with
// -tls-cert -tls-key -tls-ca (mutual TLS), each with its own node
// certificate (CN node ID, OU role) and no cluster secret: the worker
// registers over TLS, the master's probes keep it healthy, clients without
// a certificate or without TLS are refused, and a certificate for
// compress-a-1 cannot register upload-a-1 nor take compress-a-1 over.
func TestTLSMains(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/master", "./cmd/compress")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ca := newCA(t, dir)
	rds := testenv.StartRedis(t)
	masterAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	run := func(name, id string, args ...string) {
		cert, key := ca.issue(t, dir, id, name)
		tlsFlags := []string{"-tls-cert", cert, "-tls-key", key, "-tls-ca", ca.file}
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
	run("master", "master-1", "-id", "master-1", "-grpc", masterAddr, "-redis", rds.URL, "-oncall-token", "t")
	run("compress", "compress-a-1", "-id", "compress-a-1", "-region", "a", "-grpc", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"-master", masterAddr, "-store", filepath.Join(dir, "store"), "-workers", "1")

	// The test lists nodes as a node of its own (ListNodes takes nodes
	// and operators).
	tcert, tkey := ca.issue(t, dir, "timeline-a-9", "timeline")
	_, mutual, err := node.LoadTLS(tcert, tkey, ca.file)
	if err != nil {
		t.Fatal(err)
	}
	_, noCert, err := node.LoadTLS("", "", ca.file)
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
	// A certificate names one node: compress-a-1's cannot register
	// upload-a-1, and another compress-a-1 certificate cannot take the
	// live compress-a-1 over.
	register := func(id, role, regID, regRole string) error {
		c, k := ca.issue(t, dir, id, role)
		_, cfg, err := node.LoadTLS(c, k, ca.file)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := node.Dial(masterAddr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = willowv1.NewMasterClient(conn).Register(ctx, &willowv1.RegisterRequest{Node: &willowv1.NodeInfo{
			Id: regID, Role: regRole, Region: "a", Addr: "127.0.0.1:9"}})
		return err
	}
	if err := register("compress-a-1", "compress", "upload-a-1", "upload"); status.Code(err) != codes.PermissionDenied || rpcstatus.Reason(err) != auth.ReasonNodeIdentity {
		t.Errorf("compress-a-1's certificate registering upload-a-1: %v, want PERMISSION_DENIED node_identity", err)
	}
	if err := register("compress-a-1", "compress", "compress-a-1", "compress"); status.Code(err) != codes.PermissionDenied || rpcstatus.Reason(err) != master.ReasonNodeIDTaken {
		t.Errorf("another compress-a-1 certificate re-registering the live node: %v, want PERMISSION_DENIED node_id_taken", err)
	}
	// Legitimate: a new node with its own certificate registers.
	if err := register("upload-a-7", "upload", "upload-a-7", "upload"); err != nil {
		t.Errorf("upload-a-7 registering with its own certificate: %v", err)
	}
}
