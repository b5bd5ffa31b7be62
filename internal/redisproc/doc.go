// Package redisproc starts redis-server as a child process: the one piece
// of code that does, shared by the one-box cluster (cluster.StartRedis,
// behind `willow up`) and the tests (internal/testenv.StartRedis and the
// 3-master Redis Cluster of testenv.StartRedisCluster). It is a leaf: it
// imports no Willow package, so both can import it.
//
// Guarantees:
//   - Start returns only once the server accepts TCP connections on its
//     loopback address, or an error naming what failed (redis-server not
//     found, it exited at start, or it did not listen in time) with the
//     tail of its log; it never leaves a child running on error.
//   - The child dies with the process that started it (Pdeathsig SIGKILL)
//     and runs in its own process group, so a terminal's Ctrl-C reaches
//     the parent, which stops it in order.
//   - A single server keeps its data in Options.Dir (append-only file,
//     fsync every second; no RDB snapshots), so a restart on the same Dir
//     finds it; Cluster nodes keep nothing (no AOF, no RDB) but their
//     nodes.conf.
//   - Stop is graceful (SIGTERM: the server flushes its append-only file;
//     SIGKILL after StopWait); Kill is SIGKILL. Both wait for the exit.
//   - StartCluster returns once every node serves all 16384 slots and
//     knows every other node.
package redisproc
