package edgecache

import (
	"testing"
	"time"
)

// JPEGFallback is jpegFallback, for the benchmark.
var JPEGFallback = jpegFallback

// DiskFilesSent is the number of hits s sent from a disk-tier file.
func DiskFilesSent(s *Server) int64 {
	if s.disk == nil {
		return 0
	}
	return s.disk.opened.Load()
}

// HitPathServed is the number of hits s's hit path answered.
func HitPathServed(s *Server) int64 {
	if s.hits == nil {
		return 0
	}
	return s.hits.served.Load()
}

// SetSendTimeout sets the send timeout of the edges started after it,
// until the test ends.
func SetSendTimeout(t testing.TB, d time.Duration) {
	old := httpSendTimeout
	httpSendTimeout = d
	t.Cleanup(func() { httpSendTimeout = old })
}

// HeaderMore is headerMore (the hit path's MSG_MORE rule).
var HeaderMore = headerMore
