package doors_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/cluster"
	"willow/internal/testenv"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/token"
)

const readerToken = "reader-token-for-the-doors-test"

var (
	shared     *cluster.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// cl starts (once) a one-box cluster with the generated credentials plus
// a read-only operator "reader".
func cl(t *testing.T) *cluster.Cluster {
	t.Helper()
	testenv.LookPath(t, "redis-server")
	sharedOnce.Do(func() {
		ops, err := auth.ParseOperators([]byte(auth.OperatorLine("reader", readerToken, auth.RoleRead)))
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir, err := tempDir()
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = cluster.Start(ctx, cluster.Config{Dir: dir, Operators: ops,
			HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	})
	if sharedErr != nil {
		t.Fatalf("start cluster: %v", sharedErr)
	}
	return shared
}

// raw dials addr in plaintext with no credentials of any kind.
func raw(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bearer returns ctx with "authorization: Bearer tok".
func bearer(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// asNode returns ctx with node credentials: secret, ID, role, instance.
func asNode(ctx context.Context, secret, id, role, instance string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-willow-cluster-secret", secret,
		"x-willow-node-id", id, "x-willow-node-role", role, "x-willow-node-instance", instance)
}

func userToken(t *testing.T, c *cluster.Cluster, user string) string {
	t.Helper()
	tok, err := token.Sign([]byte(c.File.UploadSecret), user, "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wantErr fails unless err has code and reason.
func wantErr(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || (reason != "" && rpcstatus.Reason(err) != reason) {
		t.Fatalf("%s: %v (reason %q), want %v %s", what, err, rpcstatus.Reason(err), code, reason)
	}
}

func testJPEG(t *testing.T, seed uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := 0; y < 48; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 5), seed, 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func begin(ctx context.Context, uc willowv1.UploadClient, tok, user, id string, data []byte) (*willowv1.BeginResponse, error) {
	sum := sha256.Sum256(data)
	return uc.Begin(ctx, &willowv1.BeginRequest{UploadId: id, Token: tok, Business: "moments", User: user,
		Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(data)), Sha256: hex.EncodeToString(sum[:]), ContentType: "image/jpeg", Filename: "a.jpg"})
}

func chunks(ctx context.Context, uc willowv1.UploadClient, user, id string, data []byte) (int64, error) {
	st, err := uc.Chunks(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&willowv1.Chunk{UploadId: id, User: user, Offset: 0, Data: data}); err != nil && err != io.EOF {
		return 0, err
	}
	resp, err := st.CloseAndRecv()
	return resp.GetOffset(), err
}

// TestPublicStaysOpen: health checks need no credential (Kubernetes
// probes), everything else does.
func TestPublicStaysOpen(t *testing.T) {
	c := cl(t)
	conn := raw(t, c.File.Regions["a"].Upload)
	if _, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check without credentials: %v", err)
	}
}

func tempDir() (string, error) { return os.MkdirTemp("", "willow-doors-") }

// TestFakeNodeRegister: Register and Heartbeat without the cluster secret,
// with a wrong one, with a client's token, or claiming another node's ID
// are refused; a node holding the secret registers.
func TestFakeNodeRegister(t *testing.T) {
	c := cl(t)
	mc := willowv1.NewMasterClient(raw(t, c.File.Master))
	info := &willowv1.NodeInfo{Id: "upload-a-9", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}
	ctx := ctxT(t)
	_, err := mc.Register(ctx, &willowv1.RegisterRequest{Node: info})
	wantErr(t, "register without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = mc.Heartbeat(ctx, &willowv1.HeartbeatRequest{Node: info})
	wantErr(t, "heartbeat without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = mc.Watch(ctx, &willowv1.WatchRequest{NodeId: "upload-a-9"})
	if err == nil {
		var s grpc.ServerStreamingClient[willowv1.WatchEvent]
		s, _ = mc.Watch(ctx, &willowv1.WatchRequest{NodeId: "upload-a-9"})
		_, err = s.Recv()
	}
	wantErr(t, "watch without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = mc.Register(asNode(ctx, "guessed-secret", "upload-a-9", "upload", "x"), &willowv1.RegisterRequest{Node: info})
	wantErr(t, "register with a wrong secret", err, codes.Unauthenticated, auth.ReasonBadCredentials)
	_, err = mc.Register(bearer(ctx, userToken(t, c, "mallory")), &willowv1.RegisterRequest{Node: info})
	wantErr(t, "register with a client token", err, codes.PermissionDenied, auth.ReasonWrongClass)
	_, err = mc.Register(bearer(ctx, c.File.OncallToken), &willowv1.RegisterRequest{Node: info})
	wantErr(t, "register with an operator token", err, codes.PermissionDenied, auth.ReasonWrongClass)
	_, err = mc.Register(asNode(ctx, c.File.ClusterSecret, "compress-a-9", "compress", "x"), &willowv1.RegisterRequest{Node: info})
	wantErr(t, "register as another node than the credential's", err, codes.PermissionDenied, auth.ReasonNodeIdentity)

	// Legitimate: the cluster secret registers a new node.
	nctx := asNode(ctx, c.File.ClusterSecret, "upload-a-9", "upload", "inst-1")
	if _, err := mc.Register(nctx, &willowv1.RegisterRequest{Node: info}); err != nil {
		t.Fatalf("legitimate register: %v", err)
	}
	if _, err := mc.Heartbeat(nctx, &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1}}); err != nil {
		t.Fatalf("legitimate heartbeat: %v", err)
	}
}

// TestReRegisterHijack: a second credential (another process holding the
// secret) cannot take over a live node ID, by Register or Heartbeat; the
// real node stays routed.
func TestReRegisterHijack(t *testing.T) {
	c := cl(t)
	mc := willowv1.NewMasterClient(raw(t, c.File.Master))
	ctx := ctxT(t)
	real := c.File.Regions["a"].Upload
	evil := &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:9"}
	hctx := asNode(ctx, c.File.ClusterSecret, "upload-a-1", "upload", "hijacker")
	_, err := mc.Register(hctx, &willowv1.RegisterRequest{Node: evil})
	wantErr(t, "re-register of a live node ID", err, codes.PermissionDenied, "node_id_taken")
	_, err = mc.Heartbeat(hctx, &willowv1.HeartbeatRequest{Node: evil, Load: &willowv1.Load{SuccessRate: 1}})
	wantErr(t, "heartbeat for a live node ID", err, codes.PermissionDenied, "node_id_taken")

	// Legitimate: Route still sends region a's uploads to the real node.
	time.Sleep(500 * time.Millisecond)
	rr, err := mc.Route(bearer(ctx, userToken(t, c, "alice")), &willowv1.RouteRequest{Role: "upload", Region: "a", Business: "moments"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ep := range rr.GetPrimary() {
		if ep.GetAddr() == evil.GetAddr() || (ep.GetNodeId() == "upload-a-1" && ep.GetAddr() != real) {
			t.Fatalf("route = %v: upload-a-1 hijacked", rr.GetPrimary())
		}
		found = found || ep.GetNodeId() == "upload-a-1"
	}
	if !found {
		t.Fatalf("route = %v, want the real upload-a-1 %s", rr.GetPrimary(), real)
	}
}

// TestUploadCallsNeedTheOwnersToken: Begin, Chunks, Status and Commit
// without a token are UNAUTHENTICATED; with another user's token they
// cannot reach the victim's upload (PERMISSION_DENIED naming the victim,
// NOT_FOUND under the attacker's own scope); the owner's upload
// completes untouched.
func TestUploadCallsNeedTheOwnersToken(t *testing.T) {
	c := cl(t)
	uc := willowv1.NewUploadClient(raw(t, c.File.Regions["a"].Upload))
	ctx := ctxT(t)
	alice, bob := userToken(t, c, "alice"), userToken(t, c, "bob")
	data := testJPEG(t, 1)
	id := "doors-owner-1"

	_, err := begin(ctx, uc, alice, "alice", id, data)
	wantErr(t, "begin without metadata token", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = begin(bearer(ctx, bob), uc, alice, "alice", id, data)
	wantErr(t, "begin as alice with bob's token", err, codes.PermissionDenied, auth.ReasonOtherUser)
	actx := bearer(ctx, alice)
	if _, err := begin(actx, uc, alice, "alice", id, data); err != nil {
		t.Fatalf("alice begin: %v", err)
	}

	_, err = chunks(ctx, uc, "alice", id, data)
	wantErr(t, "chunks without a token", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = chunks(bearer(ctx, bob), uc, "alice", id, []byte("garbage"))
	wantErr(t, "chunks into alice's upload with bob's token", err, codes.PermissionDenied, auth.ReasonOtherUser)
	_, err = chunks(bearer(ctx, bob), uc, "", id, []byte("garbage"))
	wantErr(t, "chunks by upload ID alone with bob's token", err, codes.NotFound, "unknown_upload")

	_, err = uc.Status(ctx, &willowv1.StatusRequest{UploadId: id, User: "alice"})
	wantErr(t, "status without a token", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = uc.Status(bearer(ctx, bob), &willowv1.StatusRequest{UploadId: id, User: "alice"})
	wantErr(t, "status of alice's upload with bob's token", err, codes.PermissionDenied, auth.ReasonOtherUser)
	_, err = uc.Status(bearer(ctx, bob), &willowv1.StatusRequest{UploadId: id})
	wantErr(t, "status by upload ID with bob's token", err, codes.NotFound, "unknown_upload")

	_, err = uc.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: "alice"})
	wantErr(t, "commit without a token", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = uc.Commit(bearer(ctx, bob), &willowv1.CommitRequest{UploadId: id, User: "alice"})
	wantErr(t, "commit of alice's upload with bob's token", err, codes.PermissionDenied, auth.ReasonOtherUser)
	_, err = uc.Commit(bearer(ctx, bob), &willowv1.CommitRequest{UploadId: id})
	if status.Code(err) == codes.OK {
		t.Fatalf("bob committed an upload he never began")
	}

	// Legitimate: alice's bytes, offset and commit are hers alone.
	if off, err := chunks(actx, uc, "", id, data); err != nil || off != int64(len(data)) {
		t.Fatalf("alice chunks: %d %v", off, err)
	}
	st, err := uc.Status(actx, &willowv1.StatusRequest{UploadId: id})
	if err != nil || st.GetOffset() != int64(len(data)) {
		t.Fatalf("alice status: %v %v", st, err)
	}
	cr, err := uc.Commit(actx, &willowv1.CommitRequest{UploadId: id})
	if err != nil || cr.GetMediaId() == "" {
		t.Fatalf("alice commit: %v %v", cr, err)
	}

	// GetMedia: owner fields only for the owner (and nodes).
	m, err := uc.GetMedia(bearer(ctx, bob), &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()})
	if err != nil || m.GetUser() != "" || m.GetSha256() != "" {
		t.Fatalf("bob's GetMedia = %v %v, want no owner fields", m, err)
	}
	if m, err := uc.GetMedia(actx, &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()}); err != nil || m.GetUser() != "alice" {
		t.Fatalf("alice's GetMedia = %v %v, want her owner fields", m, err)
	}
	if _, err := uc.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: cr.GetMediaId()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous GetMedia: %v, want UNAUTHENTICATED", err)
	}
}

// TestSameUploadIDTwoUsers: bob stages alice's content-derived upload ID
// first; alice's upload, with chunks naming no user, is neither blocked
// (no ambiguous_upload_id) nor mixed with bob's.
func TestSameUploadIDTwoUsers(t *testing.T) {
	c := cl(t)
	uc := willowv1.NewUploadClient(raw(t, c.File.Regions["a"].Upload))
	ctx := ctxT(t)
	data := testJPEG(t, 2)
	sum := sha256.Sum256(data)
	id := "sha256-" + hex.EncodeToString(sum[:16])
	alice, bob := bearer(ctx, userToken(t, c, "alice")), bearer(ctx, userToken(t, c, "bob"))
	if _, err := begin(bob, uc, userToken(t, c, "bob"), "bob", id, data); err != nil {
		t.Fatalf("bob begin: %v", err)
	}
	if _, err := chunks(bob, uc, "", id, data[:10]); err != nil {
		t.Fatalf("bob chunks: %v", err)
	}
	if _, err := begin(alice, uc, userToken(t, c, "alice"), "alice", id, data); err != nil {
		t.Fatalf("alice begin: %v", err)
	}
	if off, err := chunks(alice, uc, "", id, data); err != nil || off != int64(len(data)) {
		t.Fatalf("alice chunks with bob's upload staged under the same ID: %d %v", off, err)
	}
	ar, err := uc.Commit(alice, &willowv1.CommitRequest{UploadId: id})
	if err != nil {
		t.Fatalf("alice commit: %v", err)
	}
	if st, err := uc.Status(bob, &willowv1.StatusRequest{UploadId: id}); err != nil || st.GetCommitted() || st.GetOffset() != 10 {
		t.Fatalf("bob's own upload after alice's commit: %v %v, want staging at 10", st, err)
	}
	if _, err := chunks(bob, uc, "", id, data[10:]); err == nil {
		t.Fatal("bob's chunk at offset 0 of the rest should be out of order")
	}
	_ = ar
}

// TestOperatorCallsFromClients: Drain and BufferStatus refuse clients and
// anonymous callers; a read-only operator reads but cannot drain; the
// on-call developer drains, and a waiting drain returns.
func TestOperatorCallsFromClients(t *testing.T) {
	c := cl(t)
	uc := willowv1.NewUploadClient(raw(t, c.File.Regions["a"].Upload))
	ctx := ctxT(t)
	alice := bearer(ctx, userToken(t, c, "alice"))
	_, err := uc.Drain(ctx, &willowv1.DrainRequest{Pool: 1, Wait: true})
	wantErr(t, "drain without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = uc.Drain(alice, &willowv1.DrainRequest{Pool: 1, Wait: true})
	wantErr(t, "drain with a client token", err, codes.PermissionDenied, auth.ReasonWrongClass)
	_, err = uc.BufferStatus(ctx, &willowv1.BufferStatusRequest{})
	wantErr(t, "buffer status without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = uc.BufferStatus(alice, &willowv1.BufferStatusRequest{})
	wantErr(t, "buffer status with a client token", err, codes.PermissionDenied, auth.ReasonWrongClass)
	_, err = uc.Drain(bearer(ctx, readerToken), &willowv1.DrainRequest{Pool: 1})
	wantErr(t, "drain by a read-only operator", err, codes.PermissionDenied, auth.ReasonMissingRole)
	_, err = uc.ReadPool(alice, &willowv1.ReadPoolRequest{MediaId: "x"})
	if err == nil {
		var s grpc.ServerStreamingClient[willowv1.DataChunk]
		s, _ = uc.ReadPool(alice, &willowv1.ReadPoolRequest{MediaId: "x"})
		_, err = s.Recv()
	}
	wantErr(t, "pool read with a client token", err, codes.PermissionDenied, auth.ReasonWrongClass)

	// Legitimate.
	if bs, err := uc.BufferStatus(bearer(ctx, readerToken), &willowv1.BufferStatusRequest{}); err != nil || len(bs.GetPools()) != 2 {
		t.Fatalf("reader buffer status: %v %v", bs, err)
	}
	if _, err := uc.Drain(bearer(ctx, c.File.OncallToken), &willowv1.DrainRequest{Pool: 1, Wait: true}); err != nil {
		t.Fatalf("on-call drain: %v", err)
	}
}

// TestFlexNeedsOncallAndAuditNamesTheCaller: a read-only operator reads
// but cannot change flex or order drills; the audit records the
// authenticated name, not the request's actor.
func TestFlexNeedsOncallAndAuditNamesTheCaller(t *testing.T) {
	c := cl(t)
	mc := willowv1.NewMasterClient(raw(t, c.File.Master))
	ctx := ctxT(t)
	reader := bearer(ctx, readerToken)
	_, err := mc.SetFlex(reader, &willowv1.SetFlexRequest{Level: "blue", Reason: "x", Actor: "developer"})
	wantErr(t, "flex write by a read-only operator", err, codes.PermissionDenied, auth.ReasonMissingRole)
	_, err = mc.SetDrill(reader, &willowv1.SetDrillRequest{Drill: &willowv1.Drill{NodeAddr: "upload-a-1", Kind: "silence"}, ForMs: 1000})
	wantErr(t, "drill by a read-only operator", err, codes.PermissionDenied, auth.ReasonMissingRole)
	_, err = mc.SetFlex(bearer(ctx, userToken(t, c, "alice")), &willowv1.SetFlexRequest{Level: "blue", Reason: "x"})
	wantErr(t, "flex write by a client", err, codes.PermissionDenied, auth.ReasonWrongClass)
	_, err = mc.ListNodes(ctx, &willowv1.ListNodesRequest{})
	wantErr(t, "node list without credentials", err, codes.Unauthenticated, auth.ReasonNoCredentials)
	_, err = mc.ListNodes(bearer(ctx, userToken(t, c, "alice")), &willowv1.ListNodesRequest{})
	wantErr(t, "node list by a client", err, codes.PermissionDenied, auth.ReasonWrongClass)
	if _, err := mc.ListNodes(reader, &willowv1.ListNodesRequest{}); err != nil {
		t.Fatalf("reader lists nodes: %v", err)
	}

	// Legitimate: the developer (oncall_token) changes flex, whatever
	// actor the request declares.
	dev := bearer(ctx, c.File.OncallToken)
	if _, err := mc.SetFlex(dev, &willowv1.SetFlexRequest{Knobs: map[string]string{"image_quality": "60"}, Reason: "doors test", Actor: "mallory"}); err != nil {
		t.Fatalf("developer flex write: %v", err)
	}
	h, err := mc.FlexHistory(reader, &willowv1.FlexHistoryRequest{Limit: 1})
	if err != nil || len(h.GetEntries()) != 1 {
		t.Fatalf("history: %v %v", h, err)
	}
	if e := h.GetEntries()[0]; e.GetActor() != cluster.DeveloperOperator || e.GetReason() != "doors test" || !e.GetAccepted() {
		t.Fatalf("audit entry %v, want actor %q (authenticated), not the declared mallory", e, cluster.DeveloperOperator)
	}
	if _, err := mc.RollbackFlex(dev, &willowv1.RollbackFlexRequest{Reason: "doors test done"}); err != nil {
		t.Fatal(err)
	}
}
