// Package ctxio makes a blocking copy stop with its context: a reader
// that fails with the context's error once it is done, so io.Copy from a
// client's body into a file ends when the call's deadline passes.
package ctxio

import (
	"context"
	"io"
)

// Reader returns r reading until ctx is done; from then on every Read
// returns ctx.Err(). A Read already blocked in r is not interrupted.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx, r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
