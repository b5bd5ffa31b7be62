package master_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/internal/testenv"
	"willow/master"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	utoken "willow/token"
)

const (
	hbSecret       = "hb-cluster-secret"
	hbUploadSecret = "hb-upload-secret"
)

// startAuthMaster runs a master whose node authenticates nodes (the
// cluster secret) and clients (upload tokens), with stream, when set, as
// its node's extra stream interceptor.
func startAuthMaster(t *testing.T, rdb redis.UniversalClient, stream grpc.StreamServerInterceptor) *regMaster {
	t.Helper()
	cfg := node.Config{ID: "master-1", Role: "master", ShutdownGrace: time.Second, Logger: quiet(),
		Auth: &auth.Config{ClusterSecret: hbSecret, UploadSecret: []byte(hbUploadSecret)}}
	if stream != nil {
		cfg.Stream = []grpc.StreamServerInterceptor{stream}
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := master.New(regConfig(), master.Deps{Node: n, Redis: rdb, Prober: okProber{}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, n.Run, s.Run)
	conn := dialMaster(t, n.Addr(), auth.NodeCredentials{Secret: hbSecret, ID: "probe-node", Role: "upload", Instance: "i0"})
	return &regMaster{addr: n.Addr(), node: n, srv: s, client: willowv1.NewMasterClient(conn)}
}

// dialMaster connects to addr presenting creds (none when nil) on every
// call.
func dialMaster(t *testing.T, addr string, creds credentials.PerRPCCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if creds != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(creds))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wantStatus fails t unless err is a status with code and reason.
func wantStatus(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || rpcstatus.Reason(err) != reason {
		t.Fatalf("%s: %v, want %v with reason %q", what, err, code, reason)
	}
}

// streamBeat sends one heartbeat on st and returns the answer.
func streamBeat(st grpc.BidiStreamingClient[willowv1.HeartbeatRequest, willowv1.HeartbeatResponse], req *willowv1.HeartbeatRequest) (*willowv1.HeartbeatResponse, error) {
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return st.Recv()
}

// counter is the value of a counter series of reg with the given labels
// (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestHeartbeatStream: a node's heartbeats on one stream are answered in
// order and keep it in Route; a heartbeat of a node the registry does not
// know asks it to register again, and the stream goes on.
func TestHeartbeatStream(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startAuthMaster(t, rdb, nil)
	info := &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}
	conn := dialMaster(t, m.addr, auth.NodeCredentials{Secret: hbSecret, ID: info.Id, Role: info.Role, Instance: "i1"})
	mc := willowv1.NewMasterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := mc.HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := streamBeat(st, &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1}})
	if err != nil || !resp.GetReregister() {
		t.Fatalf("heartbeat before Register: %v %v, want reregister", resp, err)
	}
	if _, err := mc.Register(ctx, &willowv1.RegisterRequest{Node: info}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		resp, err := streamBeat(st, &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1, InFlight: int32(i)}})
		if err != nil || resp.GetReregister() {
			t.Fatalf("heartbeat %d on the stream: %v %v", i, resp, err)
		}
	}
	regWait(t, 5*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream after CloseSend: %v, want the master to end it (io.EOF)", err)
	}
}

// rawCodec sends and receives messages as the bytes given: a caller that
// writes whatever it likes on the stream.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestHeartbeatStreamRefuses: the attacker's side of the stream. Callers
// that are not nodes cannot open it; a node cannot heartbeat for another
// node, with invalid node info, or for an ID another live credential
// holds. Each refusal is a status with its reason, as the unary Heartbeat
// answers. Bytes that are no heartbeat end the stream with grpc-go's
// INTERNAL (it writes that status itself, before the handler sees the
// error), and the master goes on.
func TestHeartbeatStreamRefuses(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startAuthMaster(t, rdb, nil)
	info := &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}
	nodeCreds := auth.NodeCredentials{Secret: hbSecret, ID: info.Id, Role: info.Role, Instance: "i1"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := willowv1.NewMasterClient(dialMaster(t, m.addr, nodeCreds)).Register(ctx, &willowv1.RegisterRequest{Node: info}); err != nil {
		t.Fatal(err)
	}
	first := func(creds credentials.PerRPCCredentials, req *willowv1.HeartbeatRequest) error {
		st, err := willowv1.NewMasterClient(dialMaster(t, m.addr, creds)).HeartbeatStream(ctx)
		if err != nil {
			return err
		}
		_, err = streamBeat(st, req)
		return err
	}
	beat := &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1}}

	client, err := utoken.Sign([]byte(hbUploadSecret), "alice", "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "client-class caller", first(auth.Bearer(client), beat), codes.PermissionDenied, auth.ReasonWrongClass)
	wantStatus(t, "no credentials", first(nil, beat), codes.Unauthenticated, auth.ReasonNoCredentials)
	wantStatus(t, "wrong cluster secret", first(auth.NodeCredentials{Secret: "guess", ID: info.Id, Role: info.Role}, beat),
		codes.Unauthenticated, auth.ReasonBadCredentials)
	other := auth.NodeCredentials{Secret: hbSecret, ID: "upload-a-2", Role: "upload", Instance: "i2"}
	wantStatus(t, "another node's heartbeat", first(other, beat), codes.PermissionDenied, auth.ReasonNodeIdentity)
	wantStatus(t, "ID held by another credential", first(auth.NodeCredentials{Secret: hbSecret, ID: info.Id, Role: info.Role, Instance: "i9"}, beat),
		codes.PermissionDenied, master.ReasonNodeIDTaken)
	wantStatus(t, "no node info", first(nodeCreds, &willowv1.HeartbeatRequest{}), codes.InvalidArgument, master.ReasonNode)
	bad := &willowv1.NodeInfo{Id: "Upload_A", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}
	wantStatus(t, "invalid node ID", first(auth.NodeCredentials{Secret: hbSecret, ID: bad.Id, Role: "upload"}, &willowv1.HeartbeatRequest{Node: bad}),
		codes.InvalidArgument, master.ReasonNodeID)

	// A good heartbeat, then another node's on the same stream: the
	// stream's credential is the node's for the whole stream.
	st, err := willowv1.NewMasterClient(dialMaster(t, m.addr, nodeCreds)).HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamBeat(st, beat); err != nil {
		t.Fatalf("good heartbeat: %v", err)
	}
	theirs := &willowv1.NodeInfo{Id: "upload-a-2", Role: "upload", Region: "a", Addr: "127.0.0.1:2"}
	_, err = streamBeat(st, &willowv1.HeartbeatRequest{Node: theirs})
	wantStatus(t, "another node's heartbeat mid-stream", err, codes.PermissionDenied, auth.ReasonNodeIdentity)

	// Bytes that do not decode as a HeartbeatRequest (field 1 with wire
	// type 7, which does not exist).
	conn := dialMaster(t, m.addr, nodeCreds)
	raw, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		willowv1.Master_HeartbeatStream_FullMethodName, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0x0f, 0xff, 0xff, 0xff}
	if err := raw.SendMsg(&garbage); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var out []byte
	err = raw.RecvMsg(&out)
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "unmarshal") {
		t.Fatalf("garbage frame: %v, want grpc-go's INTERNAL (failed to unmarshal)", err)
	}
	// The master goes on serving the node's heartbeats.
	st, err = willowv1.NewMasterClient(dialMaster(t, m.addr, nodeCreds)).HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := streamBeat(st, beat); err != nil || resp.GetReregister() {
		t.Fatalf("heartbeat after the garbage: %v %v", resp, err)
	}
}

// TestNodeHeartbeatsOnOneStream: a node heartbeats on one
// HeartbeatStream, not with a call a heartbeat.
func TestNodeHeartbeatsOnOneStream(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startRegMaster(t, rdb, "master-1", regConfig(), okProber{})
	startRegNode(t, m.addr, "upload-a-1", "upload", "a")
	reg := m.node.Registry()
	streamMsgs := func() float64 {
		return counter(t, reg, "grpc_server_msg_received_total", map[string]string{"grpc_method": "HeartbeatStream"})
	}
	regWait(t, 5*time.Second, "10 heartbeats on the stream", func() bool { return streamMsgs() >= 10 })
	if n := counter(t, reg, "grpc_server_started_total", map[string]string{"grpc_method": "HeartbeatStream"}); n != 1 {
		t.Fatalf("%v heartbeat streams started, want 1", n)
	}
	if n := counter(t, reg, "grpc_server_started_total", map[string]string{"grpc_method": "Heartbeat"}); n != 0 {
		t.Fatalf("%v unary heartbeats, want none", n)
	}
	if !inRoute(m.client, "upload", "a", "upload-a-1") {
		t.Fatal("node not in Route")
	}
}

// TestNodeHeartbeatStreamFallback: a node whose heartbeat stream breaks
// opens another at its next heartbeat; a node whose master does not have
// the stream (an older master: Unimplemented) heartbeats with unary calls.
// Either way it stays in Route.
func TestNodeHeartbeatStreamFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		code codes.Code
	}{{"broken", codes.Unavailable}, {"older master", codes.Unimplemented}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := testenv.StartRedis(t).Client(t)
			var opened atomic.Int64
			// The stream breaks after 3 heartbeats (tc.code), or (older
			// master) is refused at once.
			cut := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if info.FullMethod != willowv1.Master_HeartbeatStream_FullMethodName {
					return h(srv, ss)
				}
				opened.Add(1)
				if tc.code == codes.Unimplemented {
					return status.Error(codes.Unimplemented, "unknown method HeartbeatStream")
				}
				return h(srv, &cutStream{ServerStream: ss, left: 3, code: tc.code})
			}
			m := startAuthMaster(t, rdb, cut)
			n, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", MasterAddr: m.addr,
				HeartbeatInterval: 100 * time.Millisecond, ShutdownGrace: time.Second, HTTPAddr: "127.0.0.1:1", Logger: quiet(),
				Auth: &auth.Config{ClusterSecret: hbSecret}})
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(t, n.Run)
			reg := m.node.Registry()
			unary := func() float64 {
				return counter(t, reg, "grpc_server_started_total", map[string]string{"grpc_method": "Heartbeat"})
			}
			switch tc.code {
			case codes.Unimplemented:
				regWait(t, 5*time.Second, "10 unary heartbeats", func() bool { return unary() >= 10 })
				if o := opened.Load(); o != 1 {
					t.Fatalf("streams tried: %d, want 1 (then unary for a while)", o)
				}
			default:
				regWait(t, 5*time.Second, "4 heartbeat streams", func() bool { return opened.Load() >= 4 })
				if u := unary(); u != 0 {
					t.Fatalf("%v unary heartbeats, want none (the master has the stream)", u)
				}
			}
			regWait(t, 2*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
		})
	}
}

// cutStream ends its stream with code once left messages are received.
type cutStream struct {
	grpc.ServerStream
	left int
	code codes.Code
}

func (c *cutStream) RecvMsg(m any) error {
	if c.left == 0 {
		return status.Error(c.code, "stream cut by the test")
	}
	c.left--
	return c.ServerStream.RecvMsg(m)
}
