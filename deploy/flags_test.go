package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// binaries are the commands the image ships (deploy/docker/Dockerfile).
var binaries = []string{"master", "upload", "compress", "edgecache", "timeline", "willow"}

// TestCommandLinesMatchBinaries builds the real binaries and checks that
// every flag the Kubernetes manifests and the compose file pass exists in
// the binary it is passed to, and that the Dockerfile builds each binary
// they run.
func TestCommandLinesMatchBinaries(t *testing.T) {
	docker, err := os.ReadFile(filepath.Join("docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		if !bytes.Contains(docker, []byte("./cmd/"+b)) {
			t.Errorf("Dockerfile does not build ./cmd/%s", b)
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "USER 65532", "libheif-examples", "-slim"} {
		if !bytes.Contains(docker, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}

	bin := t.TempDir()
	args := []string{"build", "-o", bin + "/"}
	for _, b := range binaries[:5] {
		args = append(args, "../cmd/"+b)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flags := map[string][]string{}
	for _, b := range binaries[:5] {
		out, _ := exec.Command(filepath.Join(bin, b), "-h").CombinedOutput() // exits 2 or 0
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := regexp.MustCompile(`^  -(\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				flags[b] = append(flags[b], m[1])
			}
		}
		if len(flags[b]) == 0 {
			t.Fatalf("%s -h listed no flags:\n%s", b, out)
		}
	}
	check := func(where, binary string, args []string) {
		t.Helper()
		known, ok := flags[binary]
		if !ok {
			t.Errorf("%s runs %q, not a Willow service binary", where, binary)
			return
		}
		for _, a := range args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "-") && !slices.Contains(known, name) {
				t.Errorf("%s: %s has no flag -%s (it has %v)", where, binary, name, known)
			}
		}
	}

	for _, o := range overlays {
		for _, r := range render(t, o).Resources() {
			if r.GetKind() != "Deployment" && r.GetKind() != "StatefulSet" {
				continue
			}
			obj, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range dig(obj, "spec", "template", "spec", "containers").([]any) {
				cmd := dig(c, "command").([]any)
				var args []string
				for _, a := range dig(c, "args").([]any) {
					args = append(args, a.(string))
				}
				check(o+" "+r.GetKind()+"/"+r.GetName(), strings.TrimPrefix(cmd[0].(string), "/usr/local/bin/"), args)
			}
		}
	}

	b, err := os.ReadFile(filepath.Join("docker", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var ours int
	for name, s := range compose.Services {
		if s.Image != "willow:dev" {
			continue
		}
		ours++
		if len(s.Command) == 0 {
			t.Errorf("compose service %s has no command", name)
			continue
		}
		check("compose "+name, s.Command[0], s.Command[1:])
	}
	if ours != 5 {
		t.Errorf("compose runs %d Willow services, want 5", ours)
	}
}
