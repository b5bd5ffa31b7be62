package main

import (
	"context"
	"errors"
)

func cmdToken(ctx context.Context, m *Main, args []string) error {
	return errors.New("token: not built yet")
}
