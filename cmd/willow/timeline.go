package main

import (
	"context"
	"errors"
)

func cmdTimeline(ctx context.Context, m *Main, args []string) error {
	return errors.New("timeline: not built yet")
}
