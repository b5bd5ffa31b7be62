// Package client is Willow's Go SDK for mobile-side callers and for nodes
// that call other nodes.
//
// A Router asks the master where to go (Route), caches each answer for its
// TTL and keeps the last good answer while no master answers. Router.Call
// runs a call on the primary list (the caller's region) and, on a
// retryable failure, retries on the secondary list — another region, never
// the one that failed — at most twice, not at all when the retries knob is
// off or the retry budget (10% of requests over a sliding window) is spent,
// honouring a server's retry-after hint.
//
// A Client adds uploads (Begin, chunk stream, Commit, resumed through
// Status after a broken stream) and downloads on top of a Router.
package client
