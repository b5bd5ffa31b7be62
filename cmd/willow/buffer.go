package main

import (
	"context"
	"errors"
)

func cmdBuffer(ctx context.Context, m *Main, args []string) error {
	return errors.New("buffer: not built yet")
}
