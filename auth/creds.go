package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc/credentials"
)

// NodeCredentials are a node's per-call credentials without TLS: the
// cluster secret with the node's ID, role and instance key. With mutual
// TLS the certificate does this and Secret is left empty (then it sends
// nothing). Attach with grpc.WithPerRPCCredentials.
type NodeCredentials struct {
	Secret, ID, Role, Instance string
}

var _ credentials.PerRPCCredentials = NodeCredentials{}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (n NodeCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if n.Secret == "" {
		return nil, nil
	}
	return map[string]string{MDClusterSecret: n.Secret, MDNodeID: n.ID, MDNodeRole: n.Role, MDNodeInstance: n.Instance}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// cluster secret is for clusters without TLS (one box, loopback).
func (NodeCredentials) RequireTransportSecurity() bool { return false }

// Bearer is a client's or operator's per-call credential: the token sent
// as "authorization: Bearer TOKEN". Empty sends nothing.
type Bearer string

var _ credentials.PerRPCCredentials = Bearer("")

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if b == "" {
		return nil, nil
	}
	return map[string]string{MDAuthorization: "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials; false
// so development clusters without TLS work (docs/security.md: production
// runs TLS).
func (Bearer) RequireTransportSecurity() bool { return false }

// NewInstance returns a random per-process instance key for
// NodeCredentials.Instance.
func NewInstance() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewSecret returns a random secret of n bytes, hex encoded (cluster
// secrets, development operator tokens).
func NewSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
