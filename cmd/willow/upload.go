package main

import (
	"context"
	"errors"
)

func cmdUpload(ctx context.Context, m *Main, args []string) error {
	return errors.New("upload: not built yet")
}
