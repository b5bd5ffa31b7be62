package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"willow/internal/iostat"
)

var countedDial = iostat.Dial(nil)

// Dial opens a client connection to a Willow gRPC address, over TLS when
// tlsCfg is set. The connection is lazy: it does not wait for the server.
//
// addr may list several addresses separated by commas (masters sharing
// one Redis): the connection uses the first that answers and moves to the
// next when it fails.
func Dial(addr string, tlsCfg *tls.Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if strings.Contains(addr, ",") {
		var addrs []resolver.Address
		for _, a := range strings.Split(addr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				host, _, err := net.SplitHostPort(a)
				if err != nil {
					return nil, fmt.Errorf("dial %s: %w", addr, err)
				}
				addrs = append(addrs, resolver.Address{Addr: a, ServerName: host})
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("dial %q: no address", addr)
		}
		r := manual.NewBuilderWithScheme("willow-multi")
		r.InitialState(resolver.State{Addresses: addrs})
		opts = append([]grpc.DialOption{grpc.WithResolvers(r)}, opts...)
		addr = "willow-multi:///" + addrs[0].Addr
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	all := append([]grpc.DialOption{
		// The connection's bytes count as this process's outgoing
		// traffic in heartbeats (package iostat).
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return countedDial(ctx, "tcp", a) }),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8 << 20)),
	}, opts...)
	conn, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}
