package buildinfo_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"willow/buildinfo"
)

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildinfo.Collector())
	in := buildinfo.Read()
	want := `# HELP willow_build_info Always 1; the labels say which build of Willow this process runs.
# TYPE willow_build_info gauge
willow_build_info{goversion="` + runtime.Version() + `",revision="` + in.Revision + `",version="` + in.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "willow_build_info"); err != nil {
		t.Error(err)
	}
	if probs, err := testutil.GatherAndLint(reg); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
	if in.Version == "" || in.Revision == "" || !strings.Contains(in.String(), in.Revision) {
		t.Errorf("Read() = %+v, String() = %q", in, in.String())
	}
}
