// Package buildinfo says which build of Willow is running: the version
// and VCS revision, read once from the binary (runtime/debug.ReadBuildInfo,
// which `go build` stamps from git) or set at link time with
//
//	go build -ldflags "-X willow/buildinfo.version=v1.2.3 -X willow/buildinfo.revision=abc123"
//
// Every node exports it as willow_build_info{version,revision,goversion}
// (Collector), and `willow version` prints it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Link-time overrides (-ldflags -X); empty means "read from the binary".
// They are written only by the linker.
var (
	version  string
	revision string
)

// Unknown is the version or revision of a build that carries none (go
// test, go run outside a git checkout).
const Unknown = "unknown"

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goversion"`
	// Modified is true when the revision had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
}

// Read returns this binary's build info: the -ldflags values when set,
// else the module version and vcs.revision go build recorded, else
// Unknown.
func Read() Info {
	in := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Revision == "" {
					in.Revision = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = Unknown
	}
	return in
}

// String is "VERSION (revision REV[, modified], GOVERSION)".
func (in Info) String() string {
	mod := ""
	if in.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("%s (revision %s%s, %s)", in.Version, in.Revision, mod, in.GoVersion)
}

// Collector returns a fresh willow_build_info gauge, 1 with this build's
// version, revision and goversion as labels, for one registry.
func Collector() prometheus.Collector {
	in := Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "willow_build_info",
		Help:        "Always 1; the labels say which build of Willow this process runs.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion},
	})
	g.Set(1)
	return g
}
