package main

import (
	"context"
	"errors"
)

func cmdFlex(ctx context.Context, m *Main, args []string) error {
	return errors.New("flex: not built yet")
}
