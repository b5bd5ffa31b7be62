package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"willow/client"
	"willow/media"
	"willow/rpcstatus"
)

// Verification: at the end of a run every acknowledged upload is
// downloaded raw and its SHA-256 checked.

// verify checks that every acknowledged upload is downloadable with the
// same SHA-256. Items still held in buffer pool 1 (NOT_FOUND processing)
// when the time is up are pending, not lost.
func (r *runner) verify(ctx context.Context) (lost, pending int) {
	r.mu.Lock()
	acks := append([]acked(nil), r.acks...)
	r.mu.Unlock()
	deadline := time.Now().Add(r.cfg.VerifyTimeout)
	work := make(chan acked)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				switch r.check(ctx, a, deadline) {
				case "lost":
					mu.Lock()
					lost++
					mu.Unlock()
				case "pending":
					mu.Lock()
					pending++
					mu.Unlock()
				}
			}
		}()
	}
	for _, a := range acks {
		work <- a
	}
	close(work)
	wg.Wait()
	return lost, pending
}

func (r *runner) check(ctx context.Context, a acked, deadline time.Time) string {
	for {
		h := sha256.New()
		cctx, cancel := context.WithTimeout(client.WithRequest(ctx, a.business, a.user), downloadTimout)
		_, err := r.cfg.Target.Client.Download(cctx, a.id, "raw", h)
		cancel()
		if err == nil {
			if hex.EncodeToString(h.Sum(nil)) == a.sha {
				return "ok"
			}
			return "lost" // wrong bytes count as lost
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if rpcstatus.Reason(err) == media.ReasonProcessing {
				return "pending"
			}
			return "lost"
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
