package main

import (
	"context"
	"errors"
)

func cmdDrill(ctx context.Context, m *Main, args []string) error {
	return errors.New("drill: not built yet")
}
