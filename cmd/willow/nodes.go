package main

import (
	"context"
	"errors"
)

func cmdNodes(ctx context.Context, m *Main, args []string) error {
	return errors.New("nodes: not built yet")
}
