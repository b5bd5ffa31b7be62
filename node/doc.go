// Package node is what every Willow service process runs around its own
// gRPC service: the gRPC server with one shared server interceptor
// (Prometheus metrics per method, the caller guard, heartbeat load, drills,
// shedding, the caller's own interceptors, panic recovery, slog logging of
// finished calls: chain.go), the gRPC health service and server reflection, an
// admin HTTP listener with /metrics and /healthz, registration and
// heartbeats to the master, and the live flex knobs from the master's Watch
// stream.
//
// Guarantees:
//   - A panic in a handler becomes codes.Internal; the process lives on.
//   - Without a master (none configured, or none answering) a node keeps
//     serving with its last knobs, and registers again by itself when a
//     master answers.
//   - Knob changes are applied as they arrive; OnKnobs callbacks run in
//     order, never concurrently with each other.
//   - Each node has its own Prometheus registry, so several nodes can run
//     in one process (willow up, tests).
package node
