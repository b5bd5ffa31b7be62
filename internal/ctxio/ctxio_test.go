package ctxio_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"willow/internal/ctxio"
)

func TestReaderStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := ctxio.Reader(ctx, strings.NewReader("hello world"))
	b := make([]byte, 5)
	if n, err := r.Read(b); n != 5 || err != nil || string(b) != "hello" {
		t.Fatalf("Read = %d %v %q", n, err, b[:n])
	}
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read after cancel: %v, want context.Canceled", err)
	}
}
