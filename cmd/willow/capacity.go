package main

import (
	"context"
	"errors"
)

func cmdCapacity(ctx context.Context, m *Main, args []string) error {
	return errors.New("capacity: not built yet")
}
