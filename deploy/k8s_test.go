package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
)

// variants are what the tests render: each overlay as it is, and with the
// TLS component added (name "region-a+tls").
var variants = []string{"region-a", "region-b", "region-a+tls", "region-b+tls"}

// render builds a variant in-process with kustomize's krusty, as `kubectl
// kustomize deploy/k8s/overlays/NAME` would. A "+tls" variant is the overlay
// plus components/tls, rendered from an in-memory copy of deploy/k8s with a
// kustomization that adds the component.
func render(t *testing.T, variant string) resmap.ResMap {
	t.Helper()
	overlay, tls := strings.CutSuffix(variant, "+tls")
	fs := filesys.MakeFsInMemory()
	err := filepath.WalkDir("k8s", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fs.WriteFile("/"+filepath.ToSlash(path), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := "/k8s/overlays/" + overlay
	if tls {
		dir = "/k8s/variants/" + overlay + "-tls"
		k := "resources:\n  - ../../overlays/" + overlay + "\ncomponents:\n  - ../../components/tls\n"
		if err := fs.WriteFile(dir+"/kustomization.yaml", []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", variant, err)
	}
	return m
}

// TestManifestsSchemaValid renders every overlay and validates each manifest
// with kubeconform in strict mode (unknown fields are errors) against JSON
// schemas generated offline from the Kubernetes OpenAPI definitions that
// sigs.k8s.io/kustomize/kyaml bundles (see schemaDir).
func TestManifestsSchemaValid(t *testing.T) {
	rendered := map[string][]byte{}
	var gvks []gvk
	for _, o := range variants {
		m := render(t, o)
		y, err := m.AsYaml()
		if err != nil {
			t.Fatal(err)
		}
		rendered[o] = y
		for _, r := range m.Resources() {
			gvks = append(gvks, gvk{r.GetApiVersion(), r.GetKind()})
		}
	}
	gvks = append(gvks, gvk{"apps/v1", "Deployment"}) // the negative control below
	v, err := validator.New([]string{schemaDir(t, gvks) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json"}, validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	validate := func(name string, y []byte) (valid, invalid int, msgs []string) {
		for _, r := range v.Validate(name, io.NopCloser(bytes.NewReader(y))) {
			sig, _ := r.Resource.Signature()
			switch r.Status {
			case validator.Valid:
				valid++
			case validator.Empty:
			default:
				invalid++
				m := fmt.Sprintf("%s %s/%s: status %d: %v", name, sig.Kind, sig.Name, r.Status, r.Err)
				for _, ve := range r.ValidationErrors {
					m += fmt.Sprintf("\n\t%s: %s", ve.Path, ve.Msg)
				}
				msgs = append(msgs, m)
			}
		}
		return valid, invalid, msgs
	}
	for _, o := range variants {
		t.Run(o, func(t *testing.T) {
			valid, invalid, msgs := validate(o, rendered[o])
			for _, m := range msgs {
				t.Error(m)
			}
			if invalid > 0 || valid < 20 {
				t.Fatalf("%d valid, %d invalid manifests", valid, invalid)
			}
			t.Logf("%d manifests valid", valid)
		})
	}
	t.Run("negative control", func(t *testing.T) {
		bad := []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  replicas: two
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: c
          image: x
          readinessProbe: {grpc: {service: no-port}}
          imagePullPolicyy: Always
`)
		valid, _, msgs := validate("bad.yaml", bad)
		if valid != 0 {
			t.Fatal("an invalid Deployment passed validation: the schemas check nothing")
		}
		for _, want := range []string{"replicas", "imagePullPolicyy", "port"} {
			if !strings.Contains(strings.Join(msgs, "\n"), want) {
				t.Errorf("no error about %s in:\n%s", want, strings.Join(msgs, "\n"))
			}
		}
	})
}

// TestManifestsShape checks what the schema cannot: every overlay has the
// workloads, budgets, autoscalers, probes, volumes and secrets the design
// needs, in its own namespace, and every reference resolves.
func TestManifestsShape(t *testing.T) {
	for _, o := range variants {
		t.Run(o, func(t *testing.T) {
			overlay, tls := strings.CutSuffix(o, "+tls")
			region := strings.TrimPrefix(overlay, "region-")
			ns := "willow-" + region
			m := render(t, o)
			byKind := map[string][]string{}
			objs := map[string]map[string]any{}
			for _, r := range m.Resources() {
				if !clusterScoped[r.GetKind()] && r.GetNamespace() != ns {
					t.Errorf("%s/%s in namespace %q, want %s", r.GetKind(), r.GetName(), r.GetNamespace(), ns)
				}
				byKind[r.GetKind()] = append(byKind[r.GetKind()], r.GetName())
				obj, err := r.Map()
				if err != nil {
					t.Fatal(err)
				}
				objs[r.GetKind()+"/"+r.GetName()] = obj
			}
			for kind, want := range map[string][]string{
				"Deployment":              {"compress", "edgecache", "master", "timeline"},
				"StatefulSet":             {"upload"},
				"PodDisruptionBudget":     {"compress", "edgecache", "master", "timeline", "upload"},
				"HorizontalPodAutoscaler": {"compress", "edgecache", "timeline", "upload"},
				"Service":                 {"compress", "edgecache", "master", "timeline", "upload", "upload-peers"},
				"Namespace":               {ns},
			} {
				got := slices.Sorted(slices.Values(byKind[kind]))
				if !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", kind, got, want)
				}
			}
			configMaps, secrets := names(byKind["ConfigMap"]), names(byKind["Secret"])
			for _, want := range []string{"willow-secrets", "willow-tls"} {
				if !secrets[want] {
					t.Errorf("no Secret %s", want)
				}
			}
			var regionCM string
			for name := range configMaps {
				if strings.HasPrefix(name, "willow-region") {
					regionCM = name
				}
			}
			if got := dig(objs["ConfigMap/"+regionCM], "data", "region"); got != region {
				t.Errorf("region ConfigMap %q says region %v, want %s", regionCM, got, region)
			}
			for _, w := range append(prefixed("Deployment/", byKind["Deployment"]), prefixed("StatefulSet/", byKind["StatefulSet"])...) {
				pod := dig(objs[w], "spec", "template", "spec").(map[string]any)
				if dig(pod, "securityContext", "runAsNonRoot") != true {
					t.Errorf("%s: pod not runAsNonRoot", w)
				}
				for _, c := range pod["containers"].([]any) {
					c := c.(map[string]any)
					args := fmt.Sprint(c["args"])
					switch {
					case !tls && fmt.Sprint(dig(c, "readinessProbe", "grpc", "port")) != "7000":
						t.Errorf("%s: readiness is not the gRPC health probe on 7000: %v", w, c["readinessProbe"])
					case !tls && strings.Contains(args, "-tls-"):
						t.Errorf("%s: TLS flags without the TLS component: %s", w, args)
					case tls && dig(c, "readinessProbe", "httpGet", "path") != "/healthz":
						t.Errorf("%s: with TLS, readiness is not the admin /healthz: %v", w, c["readinessProbe"])
					case tls && !(strings.Contains(args, "-tls-cert=/etc/willow/tls/tls.crt") && strings.Contains(args, "-tls-key=/etc/willow/tls/tls.key") && strings.Contains(args, "-tls-ca=/etc/willow/tls/ca.crt")):
						t.Errorf("%s: TLS component did not add the -tls flags: %s", w, args)
					}
					if !hasMount(c, "/etc/willow/tls") {
						t.Errorf("%s: TLS secret not mounted", w)
					}
					if img, _ := c["image"].(string); !strings.HasPrefix(img, "registry.example.com/willow/willow:") {
						t.Errorf("%s: image %q", w, img)
					}
				}
				checkRefs(t, w, pod, configMaps, secrets)
			}
			sts := objs["StatefulSet/upload"]
			var claims []string
			for _, vct := range dig(sts, "spec", "volumeClaimTemplates").([]any) {
				claims = append(claims, dig(vct, "metadata", "name").(string))
			}
			if !slices.Equal(claims, []string{"pools", "staging"}) {
				t.Errorf("upload volume claims %v, want pools and staging", claims)
			}
			for _, h := range byKind["HorizontalPodAutoscaler"] {
				ref := dig(objs["HorizontalPodAutoscaler/"+h], "spec", "scaleTargetRef", "name")
				kind := dig(objs["HorizontalPodAutoscaler/"+h], "spec", "scaleTargetRef", "kind").(string)
				if objs[kind+"/"+ref.(string)] == nil {
					t.Errorf("HPA %s targets missing %s/%v", h, kind, ref)
				}
				metrics := dig(objs["HorizontalPodAutoscaler/"+h], "spec", "metrics").([]any)
				if dig(metrics[0], "resource", "name") != "cpu" {
					t.Errorf("HPA %s does not scale on CPU", h)
				}
			}
		})
	}
}

// clusterScoped are the kinds the overlays render without a namespace.
var clusterScoped = map[string]bool{"Namespace": true, "StorageClass": true}

func names(ns []string) map[string]bool {
	m := map[string]bool{}
	for _, n := range ns {
		m[n] = true
	}
	return m
}

func prefixed(p string, ns []string) []string {
	var out []string
	for _, n := range ns {
		out = append(out, p+n)
	}
	return out
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func hasMount(c map[string]any, path string) bool {
	ms, _ := c["volumeMounts"].([]any)
	for _, m := range ms {
		if dig(m, "mountPath") == path {
			return true
		}
	}
	return false
}

// checkRefs fails for a ConfigMap or Secret a pod uses that the overlay
// does not define (kustomize renames generated ones; this catches a
// reference it did not rewrite).
func checkRefs(t *testing.T, w string, pod map[string]any, configMaps, secrets map[string]bool) {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if n, ok := dig(v, "configMapKeyRef", "name").(string); ok && !configMaps[n] {
				t.Errorf("%s: ConfigMap %s not defined", w, n)
			}
			if n, ok := dig(v, "configMap", "name").(string); ok && !configMaps[n] {
				t.Errorf("%s: ConfigMap %s not defined", w, n)
			}
			if n, ok := dig(v, "secretKeyRef", "name").(string); ok && !secrets[n] {
				t.Errorf("%s: Secret %s not defined", w, n)
			}
			if n, ok := dig(v, "secret", "secretName").(string); ok && !secrets[n] {
				t.Errorf("%s: Secret %s not defined", w, n)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(pod)
}

type gvk struct{ apiVersion, kind string }

// schemaDir writes, into a temporary directory, one strict JSON schema per
// kind in kubeconform's file layout (deployment-apps-v1.json, service-v1.json,
// ...), converted from the Kubernetes OpenAPI v2 definitions built into
// sigs.k8s.io/kustomize/kyaml, the way openapi2jsonschema converts them:
// int-or-string and quantities become string-or-number, and every object
// with listed properties rejects unknown ones. Nothing is fetched.
//
// The bundled definitions are Kubernetes 1.21.2. Two later APIs the
// manifests use are added here, each the exact shape it has upstream:
// Probe.grpc (GRPCAction{port int32 required, service string}, Kubernetes
// 1.24+) and autoscaling/v2 HorizontalPodAutoscaler (GA in 1.23, the same
// schema as the bundled autoscaling/v2beta2).
func schemaDir(t *testing.T, want []gvk) string {
	t.Helper()
	raw, err := json.Marshal(openapi.Schema().Definitions)
	if err != nil {
		t.Fatal(err)
	}
	var defs map[string]any
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatal(err)
	}
	probe := dig(defs, "io.k8s.api.core.v1.Probe", "properties").(map[string]any)
	probe["grpc"] = map[string]any{"$ref": "#/definitions/io.k8s.api.core.v1.GRPCAction"}
	defs["io.k8s.api.core.v1.GRPCAction"] = map[string]any{
		"type":     "object",
		"required": []any{"port"},
		"properties": map[string]any{
			"port":    map[string]any{"type": "integer", "format": "int32"},
			"service": map[string]any{"type": "string"},
		},
	}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	for name, d := range defs {
		defs[name] = strictify(d)
	}

	byGVK := map[gvk]string{{"autoscaling/v2", "HorizontalPodAutoscaler"}: "io.k8s.api.autoscaling.v2beta2.HorizontalPodAutoscaler"}
	for name, d := range defs {
		list, _ := dig(d, "x-kubernetes-group-version-kind").([]any)
		for _, x := range list {
			g, _ := dig(x, "group").(string)
			v, _ := dig(x, "version").(string)
			k, _ := dig(x, "kind").(string)
			av := v
			if g != "" {
				av = g + "/" + v
			}
			byGVK[gvk{av, k}] = name
		}
	}
	dir := t.TempDir()
	for _, w := range want {
		name, ok := byGVK[w]
		if !ok {
			continue // kubeconform reports the missing schema
		}
		closure := map[string]any{}
		var collect func(v any)
		collect = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if ref, ok := v["$ref"].(string); ok {
					n := strings.TrimPrefix(ref, "#/definitions/")
					if _, seen := closure[n]; !seen {
						closure[n] = defs[n]
						collect(defs[n])
					}
				}
				for _, x := range v {
					collect(x)
				}
			case []any:
				for _, x := range v {
					collect(x)
				}
			}
		}
		collect(defs[name])
		doc := map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "definitions": closure}
		for k, v := range defs[name].(map[string]any) {
			doc[k] = v
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, schemaFile(w)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// schemaFile is kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json.
func schemaFile(w gvk) string {
	group, version, grouped := strings.Cut(w.apiVersion, "/")
	suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
	if grouped {
		suffix += "-" + strings.ToLower(version)
	}
	return strings.ToLower(w.kind) + suffix + ".json"
}

// strictify applies openapi2jsonschema's conversions to one schema node.
func strictify(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if v["format"] == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		for k, x := range v {
			v[k] = strictify(x)
		}
		if _, ok := v["properties"]; ok {
			if _, set := v["additionalProperties"]; !set {
				v["additionalProperties"] = false
			}
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = strictify(x)
		}
		return v
	}
	return v
}
