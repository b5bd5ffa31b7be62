package node_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"willow/node"
)

func TestAdvertisedAddresses(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		listen, advertise, podIP string
		wantHost                 string // advertised host; port is the bound one unless wantAddr
		wantAddr                 string
		wantErr                  bool
	}{
		{name: "loopback bind advertises itself", listen: "127.0.0.1:0", wantHost: "127.0.0.1"},
		{name: "unspecified v4 refused", listen: "0.0.0.0:0", wantErr: true},
		{name: "unspecified v6 refused", listen: "[::]:0", wantErr: true},
		{name: "empty host refused", listen: ":0", wantErr: true},
		{name: "pod IP with the bound port", listen: "0.0.0.0:0", podIP: "127.0.0.9", wantHost: "127.0.0.9"},
		{name: "explicit wins over pod IP", listen: "0.0.0.0:0", podIP: "127.0.0.9", advertise: "upload-0.upload-peers:7000", wantAddr: "upload-0.upload-peers:7000"},
		{name: "explicit unspecified refused", listen: "127.0.0.1:0", advertise: "0.0.0.0:7000", wantErr: true},
		{name: "explicit without port refused", listen: "127.0.0.1:0", advertise: "10.0.0.1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := node.New(node.Config{ID: "x", Role: "compress", Region: "a", GRPCAddr: tc.listen,
				Advertise: tc.advertise, AdvertiseHost: tc.podIP})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("started, advertising %s", n.Info().GetAddr())
				}
				if !strings.Contains(err.Error(), "-advertise") {
					t.Errorf("error does not name the flag: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer n.Server().Stop()
			got := n.Info().GetAddr()
			_, port, _ := net.SplitHostPort(n.Addr())
			want := tc.wantAddr
			if want == "" {
				want = net.JoinHostPort(tc.wantHost, port)
			}
			if got != want || n.AdvertisedAddr() != want {
				t.Errorf("advertised %s, want %s (bound %s)", got, want, n.Addr())
			}
			if node.Unspecified(n.Info().GetAdminAddr()) {
				t.Errorf("admin address %s is unspecified", n.Info().GetAdminAddr())
			}
		})
	}
}

func TestSetHTTPAddrRefusesUnspecified(t *testing.T) {
	n, err := node.New(node.Config{ID: "e", Role: "edgecache", Region: "a", Advertise: "127.0.0.5:7000"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Server().Stop()
	if err := n.SetHTTPAddr("0.0.0.0:8080"); !errors.Is(err, node.ErrNoAdvertise) || !strings.Contains(err.Error(), "-advertise-http") {
		t.Fatalf("SetHTTPAddr(0.0.0.0:8080) = %v, want ErrNoAdvertise naming -advertise-http", err)
	}
	if err := n.SetHTTPAddr("127.0.0.5:8080"); err != nil || n.Info().GetHttpAddr() != "127.0.0.5:8080" {
		t.Fatalf("SetHTTPAddr(127.0.0.5:8080) = %v, advertised %q", err, n.Info().GetHttpAddr())
	}

	n2, err := node.New(node.Config{ID: "e2", Role: "edgecache", Region: "a", AdvertiseHost: "127.0.0.6", AdvertiseHTTP: "edge.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Server().Stop()
	if err := n2.SetHTTPAddr("[::]:8080"); err != nil || n2.Info().GetHttpAddr() != "edge.example:443" {
		t.Fatalf("explicit AdvertiseHTTP: %v, advertised %q", err, n2.Info().GetHttpAddr())
	}
	n3, err := node.New(node.Config{ID: "e3", Role: "edgecache", Region: "a", AdvertiseHost: "127.0.0.6"})
	if err != nil {
		t.Fatal(err)
	}
	defer n3.Server().Stop()
	if err := n3.SetHTTPAddr("[::]:8080"); err != nil || n3.Info().GetHttpAddr() != "127.0.0.6:8080" {
		t.Fatalf("AdvertiseHost: %v, advertised %q", err, n3.Info().GetHttpAddr())
	}
}
