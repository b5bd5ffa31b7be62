// Package iostat counts this process's writes and fsyncs to local disk
// (upload staging, buffer pools, file journals), for the resource figures
// node heartbeats carry (willowv1.Load disk_bytes_written, fsyncs).
// Counters are process-wide and cumulative.
package iostat

import "sync/atomic"

var written, fsyncs atomic.Int64

// Wrote counts n bytes written to local disk.
func Wrote(n int) {
	if n > 0 {
		written.Add(int64(n))
	}
}

// Sync fsyncs f and counts it.
func Sync(f interface{ Sync() error }) error {
	fsyncs.Add(1)
	return f.Sync()
}

// Written is the bytes written since the process started.
func Written() int64 { return written.Load() }

// Fsyncs is the fsyncs issued since the process started.
func Fsyncs() int64 { return fsyncs.Load() }
