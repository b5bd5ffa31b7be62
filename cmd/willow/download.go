package main

import (
	"context"
	"errors"
)

func cmdDownload(ctx context.Context, m *Main, args []string) error {
	return errors.New("download: not built yet")
}
