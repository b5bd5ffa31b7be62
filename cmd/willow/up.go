package main

import (
	"context"
	"errors"
)

func cmdUp(ctx context.Context, m *Main, args []string) error {
	return errors.New("up: not built yet")
}
