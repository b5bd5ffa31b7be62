package master_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	willowv1 "willow/proto/willow/v1"
)

// TestRegisterRefusesUnspecifiedAddresses: the master never hands out a
// bind-all address (a node registering 0.0.0.0 or [::] is refused), so
// the registry behind Route, the edge ring and pool-2 reads only holds
// advertised addresses.
func TestRegisterRefusesUnspecifiedAddresses(t *testing.T) {
	m := startMaster(t, testenv.StartRedis(t).Client(t), "master-1")
	ctx := ctxT(t)
	for _, info := range []*willowv1.NodeInfo{
		{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "0.0.0.0:7000"},
		{Id: "upload-a-2", Role: "upload", Region: "a", Addr: "[::]:7000"},
		{Id: "upload-a-3", Role: "upload", Region: "a", Addr: ":7000"},
		{Id: "edge-a-1", Role: "edgecache", Region: "a", Addr: "10.0.0.1:7000", HttpAddr: "0.0.0.0:8080"},
	} {
		if _, err := m.client.Register(ctx, &willowv1.RegisterRequest{Node: info}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Register(%s at %s / %q) = %v, want INVALID_ARGUMENT", info.GetId(), info.GetAddr(), info.GetHttpAddr(), err)
		}
	}
	if _, err := m.client.Register(ctx, &willowv1.RegisterRequest{Node: &willowv1.NodeInfo{Id: "upload-a-4", Role: "upload", Region: "a", Addr: "10.0.0.4:7000"}}); err != nil {
		t.Fatalf("Register of an advertised address: %v", err)
	}
	ls, err := m.client.ListNodes(ctx, &willowv1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ls.GetNodes() {
		if n.GetNode().GetAddr() != "10.0.0.4:7000" {
			t.Errorf("registry holds %s at %s", n.GetNode().GetId(), n.GetNode().GetAddr())
		}
	}
}
