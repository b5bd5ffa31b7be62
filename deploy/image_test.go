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
)

// TestImageBuildScript runs the image's build step, deploy/docker/build.sh,
// on the host with the flags the Dockerfile's build stage uses (cgo on),
// and checks the result the way the image needs it: every binary is
// built, dynamically linked only against libraries that a package the
// runtime stage installs provides (ldd, then dpkg -S for the owning
// package), and the runtime stage runs as a non-root user with ffmpeg.
// There is no Docker engine on the development machines or CI, so this is
// what can be proved without one; it needs the host to be the Debian
// release the Dockerfile's images are (the package names are per release).
func TestImageBuildScript(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles every binary with cgo")
	}
	for _, tool := range []string{"ldd", "dpkg", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the check needs a Debian host", tool)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join("docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	runtimePkgs, bases := runtimeStage(t, string(dockerfile))
	codename := hostCodename(t)
	for _, b := range bases {
		if !strings.Contains(b, codename) && !strings.HasPrefix(b, "debian:"+hostMajor(t)+".") {
			t.Errorf("Dockerfile image %s is not Debian %s (%s) like this host: the library check below would not hold for it", b, hostMajor(t), codename)
		}
	}
	for _, want := range []string{"ffmpeg", "ca-certificates"} {
		if !slices.Contains(runtimePkgs, want) {
			t.Errorf("runtime stage does not install %s", want)
		}
	}

	out := t.TempDir()
	cmd := exec.Command("sh", filepath.Join("docker", "build.sh"), out)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // the script must force cgo on itself
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	owners := map[string]string{} // library path -> package
	for _, bin := range binaries {
		path := filepath.Join(out, bin)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("build.sh did not build %s: %v", bin, err)
			continue
		}
		libs := linked(t, path)
		if len(libs) == 0 {
			t.Errorf("%s links no shared library: built without cgo?", bin)
		}
		for _, lib := range libs {
			pkg, ok := owners[lib]
			if !ok {
				pkg = owner(t, lib)
				owners[lib] = pkg
			}
			if !slices.Contains(runtimePkgs, pkg) {
				t.Errorf("%s links %s from package %s, which the Dockerfile's runtime stage does not install", bin, lib, pkg)
			}
		}
	}
	// compress needs libheif and libjpeg-turbo through cgo: without them
	// the image would fail at its first HEIC or JPEG.
	for _, want := range []string{"libheif", "libjpeg"} {
		if !slices.ContainsFunc(linked(t, filepath.Join(out, "compress")), func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("compress does not link %s", want)
		}
	}
	t.Logf("libraries and their packages: %v", owners)
}

// runtimeStage returns the packages the Dockerfile's last stage installs
// with apt-get install and every FROM image (ARG defaults resolved).
func runtimeStage(t *testing.T, dockerfile string) (pkgs, bases []string) {
	t.Helper()
	joined := strings.ReplaceAll(dockerfile, "\\\n", " ")
	args := map[string]string{}
	var stages [][]string
	sc := bufio.NewScanner(strings.NewReader(joined))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(line, "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				args[k] = v
			}
		case "FROM":
			img := os.Expand(f[1], func(k string) string { return args[k] })
			bases = append(bases, img)
			stages = append(stages, nil)
		case "RUN":
			if len(stages) > 0 {
				stages[len(stages)-1] = append(stages[len(stages)-1], line)
			}
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build and a runtime stage", len(stages))
	}
	install := regexp.MustCompile(`apt-get install ([^&;]*)`)
	for _, run := range stages[len(stages)-1] {
		for _, m := range install.FindAllStringSubmatch(run, -1) {
			for _, w := range strings.Fields(m[1]) {
				if !strings.HasPrefix(w, "-") {
					pkgs = append(pkgs, w)
				}
			}
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("runtime stage installs no packages")
	}
	for _, b := range bases {
		if strings.Contains(b, "latest") || !regexp.MustCompile(`:\S*\d+\.\d+`).MatchString(b) {
			t.Errorf("image %s is not pinned by version", b)
		}
	}
	return pkgs, bases
}

var lddLine = regexp.MustCompile(`^\s*(?:\S+ => )?(/\S+) \(0x`)

// linked lists the absolute paths of the shared libraries ldd resolves for
// bin (the vDSO has none); an unresolved one fails the test.
func linked(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil
		}
		t.Fatalf("ldd %s: %v\n%s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "not found") {
			t.Errorf("%s: %s", bin, strings.TrimSpace(line))
		}
		if m := lddLine.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	return libs
}

// owner is the Debian package (without its architecture) that installed
// lib, trying the path as ldd gave it, its /usr or non-/usr twin (merged
// /usr: dpkg records whichever the package shipped) and its real path.
func owner(t *testing.T, lib string) string {
	t.Helper()
	cands := []string{lib}
	if rest, ok := strings.CutPrefix(lib, "/usr"); ok {
		cands = append(cands, rest)
	} else {
		cands = append(cands, "/usr"+lib)
	}
	if real, err := filepath.EvalSymlinks(lib); err == nil {
		cands = append(cands, real)
		if rest, ok := strings.CutPrefix(real, "/usr"); ok {
			cands = append(cands, rest)
		}
	}
	for _, c := range cands {
		out, err := exec.Command("dpkg", "-S", c).Output()
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(out), "\n")
		pkg, _, _ := strings.Cut(first, ": ")
		pkg, _, _ = strings.Cut(pkg, ":") // libc6:amd64
		return pkg
	}
	t.Errorf("no Debian package owns %s", lib)
	return "?"
}

func osRelease(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = strings.Trim(v, `"`)
		}
	}
	return kv
}

func hostCodename(t *testing.T) string { return osRelease(t)["VERSION_CODENAME"] }
func hostMajor(t *testing.T) string    { return osRelease(t)["VERSION_ID"] }
