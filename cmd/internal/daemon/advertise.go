package daemon

import (
	"fmt"

	"willow/node"
)

// checkAdvertise refuses, before anything listens, a node whose gRPC
// listen address is unspecified (0.0.0.0, [::], empty host) with neither
// -advertise nor $POD_IP: it would register an address nobody can dial.
// node.New checks the same again once the port is known, and the edge
// cache's HTTP address is checked when its listener opens
// (-advertise-http).
func (d *Daemon) checkAdvertise(nc *NodeSection) error {
	for _, a := range []string{nc.Advertise, nc.AdvertiseHTTP} {
		if a != "" {
			if err := node.CheckAdvertise(a); err != nil {
				return err
			}
		}
	}
	if nc.Advertise == "" && nc.GRPCAddr != "" && node.Unspecified(nc.GRPCAddr) && d.Getenv("POD_IP") == "" {
		return fmt.Errorf("-grpc %s binds an unspecified address: set -advertise HOST:PORT (node.advertise in the config) or $POD_IP, the address clients and peers reach this node at", nc.GRPCAddr)
	}
	return nil
}
