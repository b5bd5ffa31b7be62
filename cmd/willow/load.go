package main

import (
	"context"
	"errors"
)

func cmdLoad(ctx context.Context, m *Main, args []string) error {
	return errors.New("load: not built yet")
}
