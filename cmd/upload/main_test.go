package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"willow/auth"
	"willow/cmd/internal/daemontest"
	willowv1 "willow/proto/willow/v1"
)

func TestRunServesUpload(t *testing.T) {
	dir := t.TempDir()
	cfg := "node:\n  region: a\nupload:\n  staging: " + filepath.Join(dir, "staging") + "\n  pool_dir: " + filepath.Join(dir, "pools") +
		"\n  committed_ttl: 2h\n  sync_every: 1048576\n  poll_interval: 100ms\n  journal_key: \"{j}:c\"\nstore:\n  dir: " + filepath.Join(dir, "store") + "\n"
	ops := filepath.Join(dir, "operators.yaml")
	if err := os.WriteFile(ops, []byte(auth.OperatorLine("ops", "op-token", auth.RoleRead)), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _ := daemontest.StartWithConfig(t, run, cfg, "-secret", "s", "-operators", ops)
	if n.Config().ID != "upload-a-1" {
		t.Fatalf("id %q", n.Config().ID)
	}
	// Buffer status is an operator's call: a named identity with role read.
	conn := daemontest.Dial(t, n, grpc.WithPerRPCCredentials(auth.Bearer("op-token")))
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
	daemontest.Refuses(t, run, env, []daemontest.Refusal{
		{Args: []string{"-region", "a", "-staging", staging, "-store", store}, Want: "Secret"},
		{Args: []string{"-region", "a", "-secret", "s", "-store", store}, Want: "StagingDir"},
		{Args: []string{"-secret", "s", "-staging", staging, "-store", store}, Want: "-region"},
		{Args: []string{"-region", "a", "-secret", "s", "-staging", staging}, Want: "-store"},
		{Args: []string{"-region", "a", "-secret", "CHANGE-ME", "-staging", staging, "-store", store}, Want: "placeholder"},
	})
}

func TestConfigFile(t *testing.T) {
	daemontest.ConfigFile(t, run, "Upload.Config.Secret", "Upload.Config.Limits", "Upload.Config.Logger")
}
