package daemon

import (
	"context"
	"log/slog"
	"sync"
)

// Retiring returns the context to pass to Serve for a service that must
// hand its state over before it exits (the upload front's pools): when ctx
// ends (SIGINT, SIGTERM: the pod's termination), retire runs first, while
// the node still serves, and only then does the returned context end and
// Serve stop everything. retire bounds its own time. Call stop when Serve
// has returned: it waits for a retire under way and otherwise prevents one.
func Retiring(ctx context.Context, log *slog.Logger, retire func(context.Context) error) (rctx context.Context, stop func()) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		select {
		case <-ctx.Done():
			if err := retire(rctx); err != nil && log != nil {
				log.Error("retire incomplete", "err", err)
			}
		case <-quit:
		}
	}()
	var once sync.Once
	return rctx, func() {
		once.Do(func() { close(quit) })
		<-done
	}
}
