// Package daemontest runs Willow's service mains in process for their
// tests, and checks their config file types: every field a config file is
// meant to set round-trips through YAML, durations written as "30s", and
// the shipped config files decode.
package daemontest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	sigsyaml "sigs.k8s.io/yaml"

	"willow/auth"
	"willow/cmd/internal/daemon"
	"willow/internal/testenv"
	"willow/node"
)

// Run is a service main's binary (daemon.Service).
type Run = daemon.Binary

// ClusterSecret is the cluster secret Start gives every main.
const ClusterSecret = "test-cluster-secret"

// Env is an environment: the variables set, every other one empty.
type Env map[string]string

func (e Env) getenv(k string) string { return e[k] }

// Fail runs run with args in env and returns its error; it is for
// arguments the main refuses before it serves (a run that serves fails the
// test).
func Fail(t *testing.T, run Run, env Env, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := run.Run(ctx, daemon.Process{Stderr: &testenv.SyncBuffer{}, Getenv: env.getenv, Ready: func(*node.Node, map[string]string) {
		t.Errorf("%v: serves", args)
		cancel()
	}}, args)
	return err
}

// Start runs run with args in env (plus $WILLOW_CLUSTER_SECRET, unless env
// sets it) until it serves and returns its node and its other HTTP
// listeners by name. When the test ends the run is cancelled and must
// return nil.
func Start(t *testing.T, run Run, env Env, args ...string) (*node.Node, map[string]string) {
	t.Helper()
	e := Env{"WILLOW_CLUSTER_SECRET": ClusterSecret}
	for k, v := range env {
		e[k] = v
	}
	type served struct {
		n    *node.Node
		http map[string]string
	}
	ready := make(chan served, 1)
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run.Run(ctx, daemon.Process{Stderr: stderr, Getenv: e.getenv, Ready: func(n *node.Node, h map[string]string) { ready <- served{n, h} }}, args)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after cancel: %v\n%s", err, stderr)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("run did not stop\n%s", stderr)
		}
	})
	select {
	case s := <-ready:
		return s.n, s.http
	case err := <-done:
		done <- err
		t.Fatalf("run %v: %v\n%s", args, err, stderr)
	case <-time.After(15 * time.Second):
		t.Fatalf("run %v: not serving after 15s\n%s", args, stderr)
	}
	return nil, nil
}

// StartWithConfig is Start with -config naming a file ROLE.yaml holding
// body (in the test's temporary directory), then args.
func StartWithConfig(t *testing.T, run Run, body string, args ...string) (*node.Node, map[string]string) {
	t.Helper()
	return Start(t, run, nil, append([]string{"-config", WriteFile(t, run.Role()+".yaml", body)}, args...)...)
}

// StartOnRedis starts a Redis server (testenv.StartRedis) and run on it:
// StartWithConfig with $WILLOW_REDIS set to the server's URL. It returns
// the node, its other HTTP listeners and the server.
func StartOnRedis(t *testing.T, run Run, body string, args ...string) (*node.Node, map[string]string, *testenv.Redis) {
	t.Helper()
	r := testenv.StartRedis(t)
	n, h := Start(t, run, Env{"WILLOW_REDIS": r.URL}, append([]string{"-config", WriteFile(t, run.Role()+".yaml", body)}, args...)...)
	return n, h, r
}

// WriteFile writes a config file into the test's temporary directory and
// returns its path.
func WriteFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// RoundTrip checks the config file type of a main (file, a pointer to its
// zero value): every field is tagged yaml (a key, ",inline" or "-"); every
// field with a key, filled with a distinct value, is written and decoded
// back (daemon.DecodeYAML: unknown keys refused) to the same value, with
// durations written as Go durations ("1m1.5s"); and the fields tagged "-"
// are exactly unset (their paths, as "Master.Config.Operators"), the ones a
// config file is not meant to set.
func RoundTrip(t *testing.T, file any, unset ...string) {
	t.Helper()
	v := reflect.ValueOf(file).Elem()
	f := &filler{}
	f.fill(t, v, "")
	b, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.durations {
		if !bytes.Contains(b, []byte(": "+d.String()+"\n")) {
			t.Errorf("duration %s is not written as %q:\n%s", d, d.String(), b)
		}
	}
	back := reflect.New(v.Type())
	if err := daemon.DecodeYAML(b, back.Interface()); err != nil {
		t.Fatalf("decode: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(back.Elem().Interface(), v.Interface()) {
		t.Errorf("round trip differs:\nwrote %+v\nread  %+v\nyaml:\n%s", v.Interface(), back.Elem().Interface(), b)
	}
	slices.Sort(f.skipped)
	slices.Sort(unset)
	if !slices.Equal(f.skipped, unset) {
		t.Errorf("fields a config file cannot set: %v, want %v", f.skipped, unset)
	}
}

type filler struct {
	n         int
	durations []time.Duration
	skipped   []string
}

var durationType = reflect.TypeOf(time.Duration(0))

func (f *filler) fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	f.n++
	switch {
	case v.Type() == durationType:
		d := time.Duration(f.n)*time.Minute + 1500*time.Millisecond
		v.SetInt(int64(d))
		f.durations = append(f.durations, d)
		return
	}
	switch v.Kind() {
	case reflect.Pointer: // a section of daemon.File's document
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		f.fill(t, v.Elem(), path)
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			tag, ok := sf.Tag.Lookup("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			p := strings.TrimPrefix(path+"."+sf.Name, ".")
			switch {
			case !ok:
				t.Errorf("%s has no yaml tag: give it a key, or \"-\" when a config file is not meant to set it", p)
			case name == "-":
				f.skipped = append(f.skipped, p)
			case opts == "inline":
				f.fill(t, v.Field(i), p)
			default:
				f.fill(t, v.Field(i), p)
			}
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", f.n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n) + 0.25)
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		f.fill(t, e, path+"[]")
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	case reflect.Map:
		k := reflect.New(v.Type().Key()).Elem()
		f.fill(t, k, path+"{}")
		e := reflect.New(v.Type().Elem()).Elem()
		f.fill(t, e, path+"{}")
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		t.Errorf("%s: a %s cannot be set from a config file: tag it yaml:\"-\"", path, v.Type())
	}
}

// ConfigMap decodes the role's file of the willow-config ConfigMap
// (deploy/k8s/base/config.yaml, from a cmd/ROLE test) into file as the
// role's binary does, failing on a key it does not know.
func ConfigMap(t *testing.T, role string, file any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "k8s", "base", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := sigsyaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	body, ok := cm.Data[role+".yaml"]
	if !ok {
		t.Fatalf("willow-config has no %s.yaml", role)
	}
	if err := daemon.DecodeYAML([]byte(body), file); err != nil {
		t.Errorf("willow-config %s.yaml: %v", role, err)
	}
}

// NodeUnset are the fields of the node: section (daemon.NodeSection, in
// the config document's field Node) that a config file does not set: the node
// runtime's fields set by code.
var NodeUnset = []string{"Node.Config.Role", "Node.Config.HTTPAddr", "Node.Config.AdvertiseHost", "Node.Config.Logger",
	"Node.Config.Unary", "Node.Config.Stream", "Node.Config.TLS", "Node.Config.ClientTLS", "Node.Config.Auth",
	"Node.Config.Shed", "Node.Config.Gauges", "Node.Config.QueueMs", "Node.Config.Now", "Node.Config.SharedProcess"}

// Dial connects to n's gRPC address as a node (cluster secret
// ClusterSecret, role upload), or with creds when given (an operator's
// auth.Bearer); the connection is closed when the test ends.
func Dial(t *testing.T, n *node.Node, creds ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(creds) == 0 {
		creds = []grpc.DialOption{grpc.WithPerRPCCredentials(auth.NodeCredentials{Secret: ClusterSecret, ID: "test-1", Role: "upload"})}
	}
	conn, err := node.Dial(n.Addr(), nil, creds...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Context is a context for the test's calls, cancelled after d or when the
// test ends.
func Context(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Refusal is arguments a main refuses and the text its error must hold.
type Refusal struct {
	Args []string
	Want string
}

// Refuses checks that run refuses each case's arguments in env before it
// serves, with an error holding Want.
func Refuses(t *testing.T, run Run, env Env, cases []Refusal) {
	t.Helper()
	for _, c := range cases {
		if err := Fail(t, run, env, c.Args...); err == nil || !strings.Contains(err.Error(), c.Want) {
			t.Errorf("%v: %v, want an error naming %q", c.Args, err, c.Want)
		}
	}
}

// ConfigFile checks the config file of a main's binary (its
// daemon.Binary.ConfigDoc, fields named for the sections: Node, Store,
// Limits, and the role capitalised): RoundTrip with the node: section's
// NodeUnset and the service's own unset fields (as
// "Master.Config.Operators"), and ConfigMap.
func ConfigFile(t *testing.T, run Run, unset ...string) {
	t.Helper()
	RoundTrip(t, run.ConfigDoc(), append(unset, NodeUnset...)...)
	ConfigMap(t, run.Role(), run.ConfigDoc())
}
