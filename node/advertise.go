package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ErrNoAdvertise is returned (wrapped) by New and SetHTTPAddr when a node
// listens on an unspecified address (0.0.0.0, [::], an empty host) and has
// no address to advertise: registering the bind address would hand peers
// and clients an address they cannot reach.
var ErrNoAdvertise = errors.New("listen address is unspecified and no advertise address is set")

// Unspecified reports whether the host of the listen address addr is
// unspecified (empty, 0.0.0.0 or ::), so that addr says nothing about
// where the node can be reached.
func Unspecified(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// CheckAdvertise validates an explicit advertise address: HOST:PORT with a
// host peers can dial (not unspecified) and a port in 1..65535.
func CheckAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("advertise address %q: %w", addr, err)
	}
	if Unspecified(host) {
		return fmt.Errorf("advertise address %q: host is unspecified", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("advertise address %q: bad port", addr)
	}
	return nil
}

// advertised resolves the address a listener bound to bound (its actual
// address, port known) is advertised under: explicit when set; else host
// (the default advertise host, e.g. $POD_IP) with the bound port; else
// bound itself when its host is specified. It fails with ErrNoAdvertise
// when none of these names a reachable host.
func advertised(explicit, host, bound string) (string, error) {
	if explicit != "" {
		if err := CheckAdvertise(explicit); err != nil {
			return "", err
		}
		return explicit, nil
	}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", bound, err)
	}
	if host != "" {
		a := net.JoinHostPort(host, port)
		if err := CheckAdvertise(a); err != nil {
			return "", err
		}
		return a, nil
	}
	if Unspecified(bound) {
		return "", fmt.Errorf("%w (bound to %s)", ErrNoAdvertise, bound)
	}
	return bound, nil
}
