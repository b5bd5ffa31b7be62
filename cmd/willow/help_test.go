package main

import (
	"encoding/json"
	"strings"
	"testing"

	"willow/buildinfo"
)

// TestHelpEveryCommand: -h and --help on every command (and subcommand)
// print that command's own flags to stdout and exit 0, with no cluster.
func TestHelpEveryCommand(t *testing.T) {
	for name, c := range commands() {
		lines := [][]string{{name, "--help"}, {name, "-h"}, {"--help", name}}
		for _, sub := range c.subs {
			lines = append(lines, []string{name, sub, "--help"})
		}
		for _, args := range lines {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				out, errs, code := run(t, args...)
				if code != 0 || errs != "" {
					t.Fatalf("exit %d, stderr %q", code, errs)
				}
				if !strings.Contains(out, "usage: willow "+name) || !strings.Contains(out, "flags of willow "+name) || !strings.Contains(out, "-json") {
					t.Fatalf("stdout does not show the command's flags:\n%s", out)
				}
			})
		}
	}
	out, _, code := run(t, "flex", "knob", "--help")
	if code != 0 || !strings.Contains(out, "flags of willow flex knob") || !strings.Contains(out, "-reason") {
		t.Errorf("flex knob --help: %d\n%s", code, out)
	}
	if out, _, code := run(t, "--help"); code != 0 || !strings.Contains(out, "flex status|set") {
		t.Errorf("willow --help: %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	in := buildinfo.Read()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, errs, code := run(t, args...)
		if code != 0 || errs != "" || out != "willow "+in.String()+"\n" || !strings.Contains(out, "revision "+in.Revision) {
			t.Errorf("willow %s: %d %q %q", args[0], code, out, errs)
		}
	}
	out, _, code := run(t, "version", "--json")
	var got buildinfo.Info
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got != in {
		t.Errorf("version --json: %d %q", code, out)
	}
}
