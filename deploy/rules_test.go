package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// workload is one rendered Deployment or StatefulSet.
type workload struct {
	kind, name string
	obj        map[string]any
}

func (w workload) String() string { return w.kind + "/" + w.name }

func (w workload) containers() []map[string]any {
	var out []map[string]any
	for _, c := range dig(w.obj, "spec", "template", "spec", "containers").([]any) {
		out = append(out, c.(map[string]any))
	}
	return out
}

func stringsOf(v any) []string {
	var out []string
	xs, _ := v.([]any)
	for _, x := range xs {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// rendered returns every object of a variant by kind/name, and its
// workloads.
func rendered(t *testing.T, variant string) (map[string]map[string]any, []workload) {
	t.Helper()
	objs := map[string]map[string]any{}
	var ws []workload
	for _, r := range render(t, variant).Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs[r.GetKind()+"/"+r.GetName()] = obj
		if r.GetKind() == "Deployment" || r.GetKind() == "StatefulSet" {
			ws = append(ws, workload{r.GetKind(), r.GetName(), obj})
		}
	}
	return objs, ws
}

// TestManifestsHoldUnderApply checks the rules that make the manifests
// safe to `kubectl apply` again and again on a live cluster (issue 16):
// no replica count where an HPA owns it, buffer pools on a named local-SSD
// storage class, secrets only through the environment or files (never the
// command line, where ps shows them), every secret env var read by the
// binary it is given to, the upload StatefulSet spread over zones as a
// hard rule, and every pod that binds 0.0.0.0 advertising $POD_IP.
func TestManifestsHoldUnderApply(t *testing.T) {
	envRead := map[string][]string{}
	for _, b := range binaries[:5] {
		envRead[b] = readEnv(t, filepath.Join("..", "cmd", b))
	}
	readme, err := os.ReadFile(filepath.Join("k8s", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			objs, ws := rendered(t, v)
			scaled := map[string]bool{}
			for key, o := range objs {
				if strings.HasPrefix(key, "HorizontalPodAutoscaler/") {
					ref := dig(o, "spec", "scaleTargetRef")
					scaled[fmt.Sprint(dig(ref, "kind"))+"/"+fmt.Sprint(dig(ref, "name"))] = true
				}
			}
			if len(scaled) == 0 {
				t.Fatal("no HPA found: the rule below checks nothing")
			}
			for _, w := range ws {
				if _, has := dig(w.obj, "spec").(map[string]any)["replicas"]; has && scaled[w.String()] {
					t.Errorf("%s: sets replicas while an HPA scales it: every apply resets the count", w)
				}
				for _, c := range w.containers() {
					checkSecretsOffCommandLine(t, w, c, envRead)
					checkAdvertise(t, w, c)
				}
			}

			sts := objs["StatefulSet/upload"]
			for _, vct := range dig(sts, "spec", "volumeClaimTemplates").([]any) {
				name := dig(vct, "metadata", "name")
				class, _ := dig(vct, "spec", "storageClassName").(string)
				switch {
				case class == "":
					t.Errorf("upload claim %v names no storage class", name)
				case objs["StorageClass/"+class] == nil:
					t.Errorf("upload claim %v: StorageClass %s is not rendered", name, class)
				case !strings.Contains(string(readme), class):
					t.Errorf("storage class %s is not documented in deploy/k8s/README.md", class)
				}
			}
			checkRetireGrace(t, objs, sts)
			zoned := false
			for _, c := range dig(sts, "spec", "template", "spec", "topologySpreadConstraints").([]any) {
				if dig(c, "topologyKey") == "topology.kubernetes.io/zone" {
					zoned = true
					if dig(c, "whenUnsatisfiable") != "DoNotSchedule" {
						t.Errorf("upload zone spread is %v, want DoNotSchedule (required)", dig(c, "whenUnsatisfiable"))
					}
				}
			}
			if !zoned {
				t.Error("upload StatefulSet has no zone spread")
			}
		})
	}
}

// secretish names a flag whose value is a credential.
var secretish = regexp.MustCompile(`(?i)(secret|token|password|passwd|credential)`)

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkSecretsOffCommandLine fails for a container that passes a secret on
// its command line: an argument expanding an env var fed from a Secret,
// or a credential flag with a literal value (a file path is fine). Every
// env var fed from a Secret must be one the binary reads.
func checkSecretsOffCommandLine(t *testing.T, w workload, c map[string]any, envRead map[string][]string) {
	t.Helper()
	fromSecret := map[string]bool{}
	for _, e := range c["env"].([]any) {
		if dig(e, "valueFrom", "secretKeyRef") != nil {
			fromSecret[dig(e, "name").(string)] = true
		}
	}
	bin := filepath.Base(stringsOf(c["command"])[0])
	for name := range fromSecret {
		if !slices.Contains(envRead[bin], name) {
			t.Errorf("%s: env %s comes from a Secret but %s does not read it", w, name, bin)
		}
	}
	for _, a := range append(stringsOf(c["command"]), stringsOf(c["args"])...) {
		for _, m := range envRef.FindAllStringSubmatch(a, -1) {
			if fromSecret[m[1]] {
				t.Errorf("%s: %q puts Secret-fed $(%s) on the command line", w, a, m[1])
			}
		}
		flagName, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && secretish.MatchString(flagName) && !strings.HasSuffix(flagName, "-file") {
			t.Errorf("%s: credential flag %q on the command line (use the env var or a -…-file)", w, a)
		}
	}
}

// checkAdvertise fails for a container that binds an unspecified address
// without $POD_IP from the downward API or an explicit -advertise.
func checkAdvertise(t *testing.T, w workload, c map[string]any) {
	t.Helper()
	args := stringsOf(c["args"])
	binds := false
	for _, a := range args {
		if strings.HasPrefix(a, "-grpc=0.0.0.0:") || strings.HasPrefix(a, "-grpc=:") || strings.HasPrefix(a, "-http=0.0.0.0:") {
			binds = true
		}
	}
	if !binds {
		return
	}
	for _, e := range c["env"].([]any) {
		if dig(e, "name") == "POD_IP" && dig(e, "valueFrom", "fieldRef", "fieldPath") == "status.podIP" {
			return
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-advertise=") }) {
		return
	}
	t.Errorf("%s binds 0.0.0.0 without POD_IP from status.podIP or -advertise: it would register an address nobody reaches", w)
}

// readEnv returns the environment variable names a command's non-test
// sources (and cmd/internal/daemon's) pass as string literals to a Getenv
// call or name in a "WILLOW_…"/"POD_IP" literal.
func readEnv(t *testing.T, dir string) []string {
	t.Helper()
	lit := regexp.MustCompile(`"((?:WILLOW_[A-Z0-9_]+)|POD_IP)"`)
	var out []string
	for _, f := range commandSources(t, dir) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestComposeHoldsTheSameRules applies the command-line rules to
// deploy/docker/compose.yaml: no credential flags with literal values,
// every Willow service that binds 0.0.0.0 advertises an address, images
// pinned by version.
func TestComposeHoldsTheSameRules(t *testing.T) {
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
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`:[^:]*\d+\.\d+[^:]*$`)
	for name, s := range compose.Services {
		if s.Image != "willow:dev" && !pinned.MatchString(s.Image) {
			t.Errorf("compose %s: image %q is not pinned to a version (x.y)", name, s.Image)
		}
		if s.Image != "willow:dev" {
			continue
		}
		binds, adv := false, false
		for _, a := range s.Command {
			flagName, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "-") && secretish.MatchString(flagName) && !strings.HasSuffix(flagName, "-file") {
				t.Errorf("compose %s: credential flag %q on the command line", name, a)
			}
			binds = binds || strings.HasPrefix(a, "-grpc=0.0.0.0:")
			adv = adv || strings.HasPrefix(a, "-advertise=")
		}
		if binds && !adv {
			t.Errorf("compose %s binds 0.0.0.0 without -advertise", name)
		}
	}
}

// checkRetireGrace fails when the upload pod's terminationGracePeriodSeconds
// cannot hold its preStop sleep, the retire (upload.retire_timeout, which
// drains the pools on SIGTERM) and the node's shutdown_grace.
func checkRetireGrace(t *testing.T, objs map[string]map[string]any, sts map[string]any) {
	t.Helper()
	pod := dig(sts, "spec", "template", "spec").(map[string]any)
	grace, _ := strconv.ParseInt(fmt.Sprint(pod["terminationGracePeriodSeconds"]), 10, 64)
	var cfg map[string]any
	for k, o := range objs {
		if strings.HasPrefix(k, "ConfigMap/willow-config") {
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(fmt.Sprint(dig(o, "data", "upload.yaml"))), &doc); err != nil {
				t.Fatal(err)
			}
			cfg = doc
		}
	}
	seconds := func(v any) int64 {
		d, err := time.ParseDuration(fmt.Sprint(v))
		if err != nil {
			t.Errorf("upload.yaml duration %v: %v", v, err)
		}
		return int64(d.Seconds())
	}
	retire := dig(cfg, "upload", "retire_timeout")
	if retire == nil {
		t.Error("upload.yaml sets no upload.retire_timeout: the default may not fit the grace period")
		return
	}
	var preStop int64
	for _, c := range pod["containers"].([]any) {
		cmd := stringsOf(dig(c, "lifecycle", "preStop", "exec", "command"))
		if len(cmd) == 2 && strings.HasSuffix(cmd[0], "sleep") {
			preStop, _ = strconv.ParseInt(cmd[1], 10, 64)
		}
	}
	need := preStop + seconds(retire) + seconds(dig(cfg, "node", "shutdown_grace"))
	if grace < need {
		t.Errorf("upload terminationGracePeriodSeconds %d < preStop %d s + retire_timeout %v + shutdown_grace %v", grace, preStop, retire, dig(cfg, "node", "shutdown_grace"))
	}
}
