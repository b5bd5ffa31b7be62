package deploy_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// binaries are the commands the image ships (deploy/docker/build.sh).
var binaries = []string{"master", "upload", "compress", "edgecache", "timeline", "willow"}

// TestCommandLinesMatchBinaries checks that every flag the Kubernetes
// manifests (with and without TLS) and the compose file pass is declared by
// the binary it is passed to (read from its source: fs.String("name", ...)
// and the like), and that the image build script compiles each binary they
// run.
func TestCommandLinesMatchBinaries(t *testing.T) {
	docker, err := os.ReadFile(filepath.Join("docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("docker", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		if !bytes.Contains(script, []byte("./cmd/"+b)) {
			t.Errorf("deploy/docker/build.sh does not build ./cmd/%s", b)
		}
	}
	for _, want := range []string{"sh deploy/docker/build.sh /out", "USER 65532", "ffmpeg", "-slim"} {
		if !bytes.Contains(docker, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}

	flags := map[string][]string{}
	for _, b := range binaries[:5] {
		flags[b] = declaredFlags(t, filepath.Join("..", "cmd", b))
		if len(flags[b]) == 0 {
			t.Fatalf("found no flags declared in cmd/%s", b)
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

	for _, o := range variants {
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

// declaredFlags returns the flag names a command's non-test sources declare:
// on a flag.FlagSet, the name argument of String, Int, Bool, Duration, ...
// and of their ...Var forms; in a flag table (daemon.Flag, bound to a
// config key), the Name of each row.
func declaredFlags(t *testing.T, dir string) []string {
	t.Helper()
	files := commandSources(t, dir)
	methods := map[string]int{ // method -> index of the name argument
		"String": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Bool": 0, "Duration": 0, "Float64": 0, "Func": 0, "BoolFunc": 0,
		"StringVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1, "BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "Var": 1, "TextVar": 1,
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if lit, ok := n.(*ast.CompositeLit); ok {
				names = append(names, flagRows(lit)...)
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := methods[sel.Sel.Name]
			if !ok || len(call.Args) <= i+1 {
				return true
			}
			if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name, err := strconv.Unquote(lit.Value); err == nil {
					names = append(names, name)
				}
			}
			return true
		})
	}
	return names
}

// flagRows returns the Names of a daemon.Flag literal, or of the rows of
// a []daemon.Flag literal.
func flagRows(lit *ast.CompositeLit) []string {
	isFlag := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == "Flag" // inside package daemon
		case *ast.SelectorExpr:
			x, ok := e.X.(*ast.Ident)
			return ok && x.Name == "daemon" && e.Sel.Name == "Flag"
		}
		return false
	}
	rows := []ast.Expr{lit}
	if at, ok := lit.Type.(*ast.ArrayType); ok && isFlag(at.Elt) {
		rows = lit.Elts
	} else if !isFlag(lit.Type) {
		return nil
	}
	var names []string
	for _, r := range rows {
		row, ok := r.(*ast.CompositeLit)
		if !ok {
			continue
		}
		for _, e := range row.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if k, _ := kv.Key.(*ast.Ident); ok && k != nil && k.Name == "Name" {
				if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
					name, _ := strconv.Unquote(v.Value)
					names = append(names, name)
				}
			}
		}
	}
	return names
}

// TestConfigFilesMatchBinaries checks every key of the per-role config files
// in the willow-config ConfigMap is a yaml field the role's binary declares
// (the binaries decode with KnownFields, so an unknown key stops a pod).
// The binary's config file (daemon.File) is built of its packages' Config
// types, so the yaml tags are read from the command, cmd/internal/daemon
// and the willow packages they import; the sections (node:, store:,
// limits: and the role's) are checked by each cmd/ROLE test, which decodes
// its file the way the binary does (daemontest.ConfigMap).
func TestConfigFilesMatchBinaries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("k8s", "base", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	for _, role := range binaries[:5] {
		body, ok := cm.Data[role+".yaml"]
		if !ok {
			t.Errorf("willow-config has no %s.yaml", role)
			continue
		}
		tags := yamlTags(t, configSources(t, filepath.Join("..", "cmd", role)))
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("%s.yaml: %v", role, err)
		}
		var walk func(prefix string, m map[string]any)
		walk = func(prefix string, m map[string]any) {
			for k, v := range m {
				if !slices.Contains(tags, k) {
					t.Errorf("%s.yaml: cmd/%s declares no field %s%s", role, role, prefix, k)
				}
				if sub, ok := v.(map[string]any); ok {
					walk(prefix+k+".", sub)
				}
			}
		}
		for section, v := range doc { // the sections themselves: each cmd/ROLE's TestConfigFile decodes this file as the binary does
			if sub, ok := v.(map[string]any); ok {
				walk(section+".", sub)
			}
		}
	}
}

// configSources lists a command's non-test Go files, those of
// cmd/internal/daemon and those of the willow packages either imports.
func configSources(t *testing.T, dir string) []string {
	t.Helper()
	files := commandSources(t, dir)
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(path, "willow/")
			if !ok || seen[rel] || strings.HasPrefix(rel, "cmd/") {
				continue
			}
			seen[rel] = true
			more, err := filepath.Glob(filepath.Join("..", rel, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, more...)
		}
	}
	return files
}

// yamlTags returns the names in the `yaml:"..."` struct tags of the
// non-test files among files.
func yamlTags(t *testing.T, files []string) []string {
	t.Helper()
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if fld, ok := n.(*ast.Field); ok && fld.Tag != nil {
				tag, _ := strconv.Unquote(fld.Tag.Value)
				if name, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ","); name != "" {
					names = append(names, name)
				}
			}
			return true
		})
	}
	return names
}

// commandSources lists a command's Go files plus those of the package every
// service main shares (cmd/internal/daemon: the node section and the
// common flags).
func commandSources(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, d := range []string{dir, filepath.Join(dir, "..", "internal", "daemon")} {
		fs, err := filepath.Glob(filepath.Join(d, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	return files
}
