// Package faults holds Willow's fault suite (tests only): it starts a
// deploy/local two-region cluster as separate processes with a real
// redis-server and versitygw, runs the load generator at a low steady
// rate, and kill -9s each role in turn — an upload front mid-stream, a
// compress worker mid-task, an edge cache, a master, Redis for 10 s, the
// S3 server for 20 s — restarting each afterwards.
//
// It asserts, per step:
//
//   - zero acknowledged uploads lost: every media ID the load generator
//     got an acknowledgement for downloads at the end with the SHA-256 it
//     uploaded (loadgen's verify);
//   - client success at least 99% with retries on, counting succeeded
//     against failed plus rejected requests made (by start time) while at
//     least one region was healthy: every second for node and master
//     kills, and outside [kill, restart + 5 s] for Redis and S3, which
//     every region depends on. Requests are the load generator's uploads
//     and thumb/medium downloads plus a prober's (an upload every 3 s and a
//     raw download of an earlier probe upload every 500 ms, which keeps the
//     edge path exercised while compress is backlogged and logs the exact
//     status of every failure). Downloads answered NotFound (variants not
//     ready yet) and arrivals the generator dropped itself count in
//     neither;
//   - a killed node leaves the healthy set in ListNodes within 3 s;
//   - the node, and then every node, is healthy again after the restart.
//
// Probe uploads are checked intact (raw, SHA-256) at the end of the suite.
// A last step sets retries=off, kills a front and an edge cache, and
// checks that failures show while nothing acknowledged is lost.
//
// TestTLSMains (not gated, about 15 s) runs the real master and compress
// binaries with -tls-cert -tls-key -tls-ca: registration and probes work
// over mutual TLS, plaintext and certificate-less clients are refused.
//
// TestAdvertiseAndRetire (gated too, about three minutes) is the
// multi-host rehearsal and the retire test: next to a deploy/local cluster
// it runs a region "c" (upload front, compress, two edge caches) bound to
// 0.0.0.0 with advertised loopback addresses (-advertise, -advertise-http,
// $POD_IP), checks that ListNodes, Route and the edge ring carry only
// those and that pool-2 reads through them work, then SIGTERMs the front
// with a full pool 2 and checks that it exits by itself and every item is
// in the S3 store with the same bytes, stored once, downloadable.
//
// TestFaults takes about five minutes on a 2-core box, so it runs only when
// WILLOW_FAULTS=1 (`make test-faults` sets it); otherwise it skips with
// that message. WILLOW_LOCAL_PORT, when set, is the deploy/local base port.
package faults
