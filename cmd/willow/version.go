package main

import (
	"context"
	"encoding/json"
	"fmt"

	"willow/buildinfo"
)

// cmdVersion is `willow version` (and `willow --version`): the build's
// version and revision.
func cmdVersion(ctx context.Context, m *Main, args []string) error {
	fs, g := m.newFlags("version")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments")
	}
	in := buildinfo.Read()
	if g.json {
		return json.NewEncoder(m.Stdout).Encode(in)
	}
	_, err = fmt.Fprintf(m.Stdout, "willow %s\n", in)
	return err
}
