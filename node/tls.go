package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrTLSConfig is returned (wrapped) when the TLS file flags are
// inconsistent: a certificate without its key, or the reverse.
var ErrTLSConfig = errors.New("node: tls: need both certificate and key")

// LoadTLS builds the server and client TLS configurations of a node from
// PEM files. All three empty means no TLS: it returns nil, nil, nil and
// the node serves and dials in plaintext.
//
// certFile and keyFile are the node's own certificate and key: the server
// presents them, and the client presents them too when the peer asks
// (mutual TLS). caFile, when set, is the CA bundle that both sides trust:
// the client verifies servers against it (instead of the system roots),
// and the server then requires and verifies client certificates, so a
// cluster given a CA runs mutual TLS. Without caFile the server accepts
// any client and the client verifies servers against the system roots.
//
// A caFile alone (no certificate) gives a client-only configuration:
// server is nil.
func LoadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" && keyFile == "" && caFile == "" {
		return nil, nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, nil, ErrTLSConfig
	}
	client = &tls.Config{MinVersion: tls.VersionTLS12}
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, nil, fmt.Errorf("node: tls ca: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("node: tls ca %s: no PEM certificate", caFile)
		}
		client.RootCAs = pool
	}
	if certFile == "" {
		return nil, client, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("node: tls keypair: %w", err)
	}
	client.Certificates = []tls.Certificate{cert}
	server = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if pool != nil {
		server.ClientCAs = pool
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return server, client, nil
}
