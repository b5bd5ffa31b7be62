package daemon_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/cmd/internal/daemon"
	"willow/node"
)

type fileConfig struct {
	Node  daemon.NodeSection `yaml:"node"`
	Store daemon.StoreConfig `yaml:"store"`
}

// parse runs the shared flags of role over args with env as the
// environment and returns the node config they yield.
func parse(t *testing.T, role string, env map[string]string, args ...string) (*fileConfig, node.Config, error) {
	t.Helper()
	d := daemon.New(role, daemon.Process{Stderr: io.Discard, Getenv: func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "WILLOW_CLUSTER_SECRET" {
			return "test-cluster-secret" // every node needs credentials
		}
		return ""
	}})
	var fc fileConfig
	if err := d.Parse(args, &fc, &fc.Node, &fc.Store); err != nil {
		return &fc, node.Config{}, err
	}
	nc, err := d.NodeConfig()
	return &fc, nc, err
}

func TestAdvertiseFlagsYAMLAndPodIP(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  grpc: 0.0.0.0:7000\n  advertise: 10.1.2.3:7000\n  advertise_http: edge.example:80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                     string
		role                     string
		env                      map[string]string
		args                     []string
		wantErr                  string // substring; empty: no error
		advertise, advertiseHTTP string
		host                     string
	}{
		{name: "unspecified bind without advertise", role: "upload", args: []string{"-grpc", "0.0.0.0:7000"}, wantErr: "-advertise"},
		{name: "empty host without advertise", role: "compress", args: []string{"-grpc", ":7000"}, wantErr: "-advertise"},
		{name: "v6 unspecified without advertise", role: "master", args: []string{"-grpc", "[::]:7000"}, wantErr: "-advertise"},
		{name: "flag", role: "upload", args: []string{"-grpc", "0.0.0.0:7000", "-advertise", "10.0.0.7:7000"}, advertise: "10.0.0.7:7000"},
		{name: "pod IP", role: "timeline", env: map[string]string{"POD_IP": "10.0.0.8"}, args: []string{"-grpc", "0.0.0.0:7000"}, host: "10.0.0.8"},
		{name: "yaml", role: "edgecache", args: []string{"-config", cfg}, advertise: "10.1.2.3:7000", advertiseHTTP: "edge.example:80"},
		{name: "flag over yaml", role: "edgecache", args: []string{"-config", cfg, "-advertise-http", "10.9.9.9:8080"}, advertise: "10.1.2.3:7000", advertiseHTTP: "10.9.9.9:8080"},
		{name: "bad advertise", role: "upload", args: []string{"-advertise", "0.0.0.0:7000"}, wantErr: "unspecified"},
		{name: "loopback default needs nothing", role: "upload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, nc, err := parse(t, tc.role, tc.env, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if nc.Advertise != tc.advertise || nc.AdvertiseHTTP != tc.advertiseHTTP || nc.AdvertiseHost != tc.host {
				t.Errorf("advertise %q http %q host %q", nc.Advertise, nc.AdvertiseHTTP, nc.AdvertiseHost)
			}
		})
	}
	if _, _, err := parse(t, "compress", nil, "-advertise-http", "x:1"); err == nil {
		t.Error("-advertise-http accepted by a binary without edge HTTP")
	}
}

func TestS3SecretSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yamlFile := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(yamlFile, []byte("store:\n  s3:\n    endpoint: s3:9000\n    secret_key_file: "+file+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WILLOW_S3_SECRET_KEY": "from-env", "WILLOW_S3_ACCESS_KEY": "ak-env"}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		want, ak string
		wantErr  bool
	}{
		{name: "env", env: env, want: "from-env", ak: "ak-env"},
		{name: "file flag over env", env: env, args: []string{"-s3-secret-key-file", file}, want: "from-file", ak: "ak-env"},
		{name: "yaml file", args: []string{"-config", yamlFile}, want: "from-file"},
		{name: "flag over everything", env: env, args: []string{"-config", yamlFile, "-s3-secret-key", "flag", "-s3-access-key", "ak"}, want: "flag", ak: "ak"},
		{name: "both flags", args: []string{"-s3-secret-key", "a", "-s3-secret-key-file", file}, wantErr: true},
		{name: "missing file", args: []string{"-s3-secret-key-file", filepath.Join(dir, "nope")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, _, err := parse(t, "compress", tc.env, tc.args...)
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fc.Store.S3.SecretKey != tc.want || fc.Store.S3.AccessKey != tc.ak {
				t.Errorf("secret %q access %q, want %q %q", fc.Store.S3.SecretKey, fc.Store.S3.AccessKey, tc.want, tc.ak)
			}
		})
	}
}

func TestOpenStoreRefusesPlaceholders(t *testing.T) {
	for _, c := range []daemon.S3Config{
		{Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "CHANGE-ME", SecretKey: "s"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "k", SecretKey: "change-me"},
	} {
		if _, err := daemon.OpenStore(daemon.StoreConfig{S3: c}); err == nil || !strings.Contains(err.Error(), "CHANGE-ME") {
			t.Errorf("OpenStore(%+v) = %v, want a refusal of the placeholder", c, err)
		}
	}
	if err := daemon.RefusePlaceholder("upload secret", "CHANGE-ME"); err == nil || !strings.Contains(err.Error(), "upload secret") {
		t.Errorf("RefusePlaceholder = %v", err)
	}
	if err := daemon.RefusePlaceholder("upload secret", "a-real-one"); err != nil {
		t.Error(err)
	}
}

func TestNodeCredentialsRequired(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{"none", map[string]string{"WILLOW_CLUSTER_SECRET": ""}, nil, "need node credentials"},
		{"placeholder", map[string]string{"WILLOW_CLUSTER_SECRET": "CHANGE-ME"}, nil, "placeholder"},
		{"flag", map[string]string{"WILLOW_CLUSTER_SECRET": ""}, []string{"-cluster-secret", "s3cret"}, ""},
		{"env", map[string]string{"WILLOW_CLUSTER_SECRET": "s3cret"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, nc, err := parse(t, "upload", tc.env, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || nc.Auth == nil || nc.Auth.ClusterSecret != "s3cret" {
				t.Fatalf("node config auth %+v, err %v", nc.Auth, err)
			}
		})
	}
}

// TestFileThenFlagsThenEnv: the config file sets what it names, a flag
// given overrides it, the environment fills only what both leave empty,
// and $WILLOW_MASTER is every service's default master but the master's.
func TestFileThenFlagsThenEnv(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	body := "node:\n  id: from-file\n  region: a\n  heartbeat_interval: 2s\n  cluster_secret: file-secret\nstore:\n  dir: /from/file\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WILLOW_MASTER": "m-env:7000", "WILLOW_CLUSTER_SECRET": "env-secret", "WILLOW_UPLOAD_SECRET": "u-env"}
	fc, nc, err := parse(t, "edgecache", env, "-config", cfg, "-id", "from-flag", "-store", "/from/flag")
	if err != nil {
		t.Fatal(err)
	}
	if nc.ID != "from-flag" || nc.Region != "a" || nc.HeartbeatInterval != 2*time.Second || nc.MasterAddr != "m-env:7000" ||
		nc.Auth.ClusterSecret != "file-secret" || string(nc.Auth.UploadSecret) != "u-env" || fc.Store.Dir != "/from/flag" {
		t.Errorf("node config %+v auth %+v store %+v", nc, nc.Auth, fc.Store)
	}
	if _, nc, _ := parse(t, "upload", env, "-region", "b", "-master", "m-flag:7000"); nc.MasterAddr != "m-flag:7000" || nc.ID != "upload-b-1" {
		t.Errorf("flag: master %q id %q", nc.MasterAddr, nc.ID)
	}
	if _, nc, _ := parse(t, "master", env); nc.MasterAddr != "" || nc.ID != "master-1" {
		t.Errorf("master: master %q id %q", nc.MasterAddr, nc.ID)
	}
	if _, _, err := parse(t, "upload", nil, "-config", writeFile(t, "node:\n  heartbeat_interval: 2000000000\n")); err == nil {
		t.Error("a duration written in nanoseconds decoded; durations are written as 2s")
	}
	if _, _, err := parse(t, "upload", nil, "-config", writeFile(t, "node:\n  bogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown key: %v", err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServiceFileAndFlags: a service's config file has node:, the shared
// sections the service declares and its own section under its role, and no
// other; each flag of its table sets its key (nested, typed from the
// field); a flag naming a key the section lacks is refused.
func TestServiceFileAndFlags(t *testing.T) {
	type section struct {
		Addr   string `yaml:"addr"`
		Nested struct {
			Items []string      `yaml:"items"`
			Wait  time.Duration `yaml:"wait"`
		} `yaml:"nested"`
	}
	flags := []daemon.Flag{{Name: "addr", Usage: "u"}, {Name: "items", Key: "nested.items", Usage: "u"}, {Name: "wait", Key: "nested.wait", Usage: "u"}}
	run := func(has daemon.Has, flags []daemon.Flag, args ...string) (*daemon.File[section], error) {
		var got *daemon.File[section]
		bin := daemon.Service("svc", has, flags, func(_ context.Context, _ *daemon.Daemon, f *daemon.File[section]) error { got = f; return nil })
		err := bin.Run(context.Background(), daemon.Process{Stderr: io.Discard}, args)
		return got, err
	}
	cfg := writeFile(t, "node:\n  region: a\nsvc:\n  addr: from-file\n  nested:\n    wait: 2s\n")
	f, err := run(daemon.NodeOnly, flags, "-config", cfg, "-items", "x,y")
	if err != nil || f.Node.Region != "a" || f.Service.Addr != "from-file" || f.Service.Nested.Wait != 2*time.Second || strings.Join(f.Service.Nested.Items, "+") != "x+y" {
		t.Fatalf("file %+v, %v", f, err)
	}
	if f, err := run(daemon.NodeOnly, flags, "-config", cfg, "-addr", "from-flag", "-wait", "3s"); err != nil || f.Service.Addr != "from-flag" || f.Service.Nested.Wait != 3*time.Second {
		t.Errorf("flags over the file: %+v, %v", f, err)
	}
	withStore := writeFile(t, "store:\n  dir: /s\nlimits:\n  max_image_bytes: 5\n")
	if _, err := run(daemon.NodeOnly, flags, "-config", withStore); err == nil || !strings.Contains(err.Error(), "store") {
		t.Errorf("store: in a file without one: %v, want it refused", err)
	}
	if _, err := run(daemon.Store, flags, "-config", withStore); err == nil || !strings.Contains(err.Error(), "limits") {
		t.Errorf("limits: in a file without one: %v, want it refused", err)
	}
	if f, err := run(daemon.Store|daemon.Limits, flags, "-config", withStore); err != nil || f.Store.Dir != "/s" || f.Limits.MaxImageBytes != 5 {
		t.Errorf("store: and limits: %+v, %v", f, err)
	}
	if _, err := run(daemon.NodeOnly, []daemon.Flag{{Name: "nope", Usage: "u"}}); err == nil || !strings.Contains(err.Error(), "-nope") {
		t.Errorf("flag without a key: %v", err)
	}
}
