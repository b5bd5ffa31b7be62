package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/cmd/internal/daemontest"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

func TestRunServesUpload(t *testing.T) {
	dir := t.TempDir()
	cfg := daemontest.WriteFile(t, "upload.yaml", "node:\n  region: a\nupload:\n  staging: "+filepath.Join(dir, "staging")+"\n  pool_dir: "+filepath.Join(dir, "pools")+
		"\n  committed_ttl: 2h\n  sync_every: 1048576\n  poll_interval: 100ms\n  journal_key: \"{j}:c\"\nstore:\n  dir: "+filepath.Join(dir, "store")+"\n")
	ops := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(ops, []byte(auth.OperatorLine("ops", "op-token", auth.RoleRead)), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _ := daemontest.Start(t, run, nil, "-config", cfg, "-secret", "s", "-operators", ops)
	if n.Config().ID != "upload-a-1" {
		t.Fatalf("id %q", n.Config().ID)
	}
	// Buffer status is an operator's call: a named identity with role read.
	conn, err := node.Dial(n.Addr(), nil, grpc.WithPerRPCCredentials(auth.Bearer("op-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := willowv1.NewUploadClient(conn).BufferStatus(context.Background(), &willowv1.BufferStatusRequest{})
	if err != nil || len(st.GetPools()) != 2 || st.GetPools()[0].GetMode() != "auto" {
		t.Fatalf("BufferStatus = %v, %v", st, err)
	}
}

// TestRunRefuses: upload.New, node.New and the store refuse what is
// missing; the main repeats none of their checks.
func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	store, staging := filepath.Join(dir, "store"), filepath.Join(dir, "staging")
	env := daemontest.Env{"WILLOW_CLUSTER_SECRET": daemontest.ClusterSecret}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-region", "a", "-staging", staging, "-store", store}, "Secret"},
		{[]string{"-region", "a", "-secret", "s", "-store", store}, "StagingDir"},
		{[]string{"-secret", "s", "-staging", staging, "-store", store}, "-region"},
		{[]string{"-region", "a", "-secret", "s", "-staging", staging}, "-store"},
		{[]string{"-region", "a", "-secret", "CHANGE-ME", "-staging", staging, "-store", store}, "placeholder"},
	} {
		if err := daemontest.Fail(t, run, env, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%v) = %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	daemontest.RoundTrip(t, &file{}, append(daemontest.NodeUnset, "Upload.Config.Secret", "Upload.Config.Limits", "Upload.Config.Logger")...)
	daemontest.ConfigMap(t, "upload", &file{})
}
