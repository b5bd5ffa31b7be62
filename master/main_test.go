package master_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"willow/internal/testenv"
	"willow/node"
)

// TestMain runs the tests, or, with WILLOW_HELPER_NODE_MASTER set, runs the
// binary as one upload node of that master until it is killed
// (TestKilledNodeProcessLeavesRoute starts it so).
func TestMain(m *testing.M) {
	if url := os.Getenv(fleetRedisEnv); url != "" {
		os.Exit(fleetMaster(url)) // BenchmarkFleet's master
	}
	if addr := os.Getenv(fleetCallerEnv); addr != "" {
		os.Exit(fleetCaller(addr)) // BenchmarkFleet's Route caller
	}
	if addr := os.Getenv("WILLOW_HELPER_NODE_MASTER"); addr != "" {
		os.Exit(helperNode(addr, os.Getenv("WILLOW_HELPER_NODE_ID")))
	}
	os.Exit(testenv.Main(m))
}

// helperNode serves one upload node (default 1 s heartbeats), printing
// "ADDR host:port" once it listens.
func helperNode(masterAddr, id string) int {
	n, err := node.New(node.Config{ID: id, Role: "upload", Region: "a", MasterAddr: masterAddr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ADDR", n.Addr())
	_ = n.Run(context.Background())
	return 0
}
