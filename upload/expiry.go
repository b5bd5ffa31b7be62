package upload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"willow/rpcstatus"
)

// Staging expiry and the staging byte budget (DESIGN.md invariant 8).
//
// An upload not committed within Config.StagingTTL is removed by the
// staging GC (every Config.GCInterval), which leaves a small tombstone in
// StagingDir/expired/ for one more StagingTTL: a late chunk, Status or
// tus/IETF request then gets NOT_FOUND upload_expired instead of
// unknown_upload, and the disk is reclaimed at once. Beginning the same
// upload ID again starts it over from zero.
//
// The budget counts the declared sizes of the uploads staged and not yet
// committed on this front (declared, not received: the disk they may
// take). A Begin of a new upload that would pass Config.StagingBudgetBytes
// answers RESOURCE_EXHAUSTED staging_full with a retry-after, instead of
// filling the disk; resuming a staged upload is never refused.

// Defaults of the staging budget and GC.
const (
	// DefaultStagingBudgetBytes is the per-front staging budget.
	DefaultStagingBudgetBytes = 8 << 30
	// DefaultStagingFullRetryAfter is the retry-after of staging_full.
	DefaultStagingFullRetryAfter = 30 * time.Second
	// DefaultGCInterval is how often the staging GC runs.
	DefaultGCInterval = time.Minute
)

const expiredDir = "expired"

func (s *Server) tombstonePaths(key, uploadID string) []string {
	d := filepath.Join(s.cfg.StagingDir, expiredDir)
	return []string{filepath.Join(d, "k-"+key), filepath.Join(d, "id-"+uploadID)}
}

// markExpired leaves the tombstones of an expired upload. They are not
// fsynced: after a crash a late chunk gets unknown_upload instead.
func (s *Server) markExpired(key, uploadID string) {
	_ = os.MkdirAll(filepath.Join(s.cfg.StagingDir, expiredDir), 0o755)
	for _, p := range s.tombstonePaths(key, uploadID) {
		_ = os.WriteFile(p, []byte(s.now().UTC().Format(time.RFC3339)), 0o644)
	}
}

// unmarkExpired drops the tombstones when the upload is begun again.
func (s *Server) unmarkExpired(key, uploadID string) {
	for _, p := range s.tombstonePaths(key, uploadID) {
		_ = os.Remove(p)
	}
}

// expiredErr returns NOT_FOUND upload_expired when key (or, with key "",
// uploadID) expired here, else nil.
func (s *Server) expiredErr(key, uploadID string) error {
	ps := s.tombstonePaths(key, uploadID)
	p := ps[0]
	if key == "" {
		p = ps[1]
	}
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	return fail(ReasonUploadExpired, "upload %q expired: not committed within %s; begin it again", uploadID, s.cfg.StagingTTL)
}

// isExpired reports whether a staged, uncommitted upload is past its TTL.
func (s *Server) isExpired(st *staged) bool {
	return st != nil && st.Committed() == nil && s.now().After(st.meta.Created.Add(s.cfg.StagingTTL))
}

// gcTombstones removes tombstones older than StagingTTL.
func (s *Server) gcTombstones(now time.Time) {
	d := filepath.Join(s.cfg.StagingDir, expiredDir)
	ents, err := os.ReadDir(d)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "k-") && !strings.HasPrefix(e.Name(), "id-") {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > s.cfg.StagingTTL {
			_ = os.Remove(filepath.Join(d, e.Name()))
		}
	}
}

// reserve counts a new staged upload of size bytes against the budget.
func (s *Server) reserve(key string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reserved[key]; !ok {
		s.reserved[key] = size
		s.reservedBytes += size
	}
}

// release stops counting key (committed, expired or terminated).
func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.reserved[key]; ok {
		delete(s.reserved, key)
		s.reservedBytes -= n
	}
}

// checkBudget refuses a new upload of size bytes over the staging budget.
func (s *Server) checkBudget(size int64) error {
	s.mu.Lock()
	used := s.reservedBytes
	s.mu.Unlock()
	if used+size <= s.cfg.StagingBudgetBytes {
		return nil
	}
	s.m.uploads.WithLabelValues("staging_full").Inc()
	return rpcstatus.Overload(ReasonStagingFull, s.cfg.StagingFullRetryAfter,
		"staging full: %d of %d bytes reserved, %d more asked", used, s.cfg.StagingBudgetBytes, size)
}

// StagingBytes reports the declared bytes of uploads staged and not
// committed on this front (what the budget counts).
func (s *Server) StagingBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reservedBytes
}

// scanReserve counts an upload found staged at startup.
func (s *Server) scanReserve(dir, key string, size int64) {
	if _, err := os.Stat(filepath.Join(dir, fileCommitted)); errors.Is(err, os.ErrNotExist) {
		s.reserve(key, size)
	}
}

// expiredNow removes a staged upload found past its TTL before the GC got
// to it, and returns its NOT_FOUND upload_expired.
func (s *Server) expiredNow(st *staged) error {
	key, id := filepath.Base(st.dir), st.meta.UploadID
	unlock := s.lock(key)
	if cur, _ := s.staged(key); cur == st && st.Committed() == nil {
		s.markExpired(key, id)
		s.forgetLocked(key, id)
	}
	unlock()
	return s.expiredErr(key, id)
}
