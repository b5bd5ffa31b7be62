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

// TestHeartbeatStreamSparse: on a stream whose heartbeats ask for sparse
// answers, the master answers the first, then only those whose answer
// carries something: a flex version other than the node's, drills
// ordered and ended, reregister. The heartbeats it does not answer still
// count (the node stays in Route), and the answers that come are the
// only messages the master sent on the stream.
func TestHeartbeatStreamSparse(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	m := startRegMaster(t, rdb, "master-1", regConfig(), okProber{})
	info := &willowv1.NodeInfo{Id: "upload-a-1", Role: "upload", Region: "a", Addr: "127.0.0.1:1"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg, err := m.client.Register(ctx, &willowv1.RegisterRequest{Node: info})
	if err != nil {
		t.Fatal(err)
	}
	ver := reg.GetFlex().GetVersion()
	sent := func() float64 {
		return counter(t, m.node.Registry(), "grpc_server_msg_sent_total", map[string]string{"grpc_method": "HeartbeatStream"})
	}
	// open starts a stream for node whose answers come on the channel.
	open := func(node *willowv1.NodeInfo) (func(ver int64), <-chan *willowv1.HeartbeatResponse) {
		st, err := m.client.HeartbeatStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		answers := make(chan *willowv1.HeartbeatResponse, 100)
		go func() {
			defer close(answers)
			for {
				resp, err := st.Recv()
				if err != nil {
					return
				}
				answers <- resp
			}
		}()
		beat := func(ver int64) {
			t.Helper()
			if err := st.Send(&willowv1.HeartbeatRequest{Node: node, Load: &willowv1.Load{SuccessRate: 1}, FlexVersion: ver, SparseAnswers: true}); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		return beat, answers
	}
	// next beats until an answer comes (within 3 s), and returns it.
	next := func(beat func(int64), answers <-chan *willowv1.HeartbeatResponse, what string) *willowv1.HeartbeatResponse {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
			beat(ver)
			select {
			case resp, ok := <-answers:
				if !ok {
					t.Fatalf("%s: the stream ended", what)
				}
				return resp
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Fatalf("%s: no answer within 3 s", what)
		return nil
	}
	// none beats n times and fails if any is answered.
	none := func(beat func(int64), answers <-chan *willowv1.HeartbeatResponse, n int, what string) {
		t.Helper()
		for range n {
			beat(ver)
		}
		select {
		case resp := <-answers:
			t.Fatalf("%s: answered %v, want no answer", what, resp)
		case <-time.After(300 * time.Millisecond):
		}
	}

	beat, answers := open(info)
	if resp := next(beat, answers, "first heartbeat"); resp.GetReregister() || resp.GetFlexVersion() != ver || len(resp.GetDrills()) != 0 {
		t.Fatalf("first heartbeat: %v, want version %d, nothing else", resp, ver)
	}
	none(beat, answers, 5, "heartbeats with nothing to say")
	beat(ver + 1000)
	if resp := <-answers; resp.GetFlexVersion() != ver {
		t.Fatalf("heartbeat of another flex version: %v, want version %d", resp, ver)
	}
	if n := sent(); n != 2 {
		t.Fatalf("%v answers sent for 7 heartbeats, want 2", n)
	}
	regWait(t, 5*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", info.Id) })

	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 10_000,
		Drill: &willowv1.Drill{NodeAddr: info.Id, Kind: "latency", LatencyMs: 5}}); err != nil {
		t.Fatal(err)
	}
	if resp := next(beat, answers, "drill ordered"); len(resp.GetDrills()) != 1 || resp.GetDrills()[0].GetLatencyMs() != 5 {
		t.Fatalf("answer after the drill: %v, want the drill", resp)
	}
	none(beat, answers, 3, "heartbeats during the drill")
	if _, err := m.client.SetDrill(ctx, &willowv1.SetDrillRequest{Token: "t", ForMs: 0,
		Drill: &willowv1.Drill{NodeAddr: info.Id, Kind: "latency"}}); err != nil {
		t.Fatal(err)
	}
	if resp := next(beat, answers, "drill ended"); len(resp.GetDrills()) != 0 {
		t.Fatalf("answer after the drill ended: %v, want no drills", resp)
	}
	none(beat, answers, 3, "heartbeats after the drill")

	// A node the registry does not know is asked to register again at
	// every heartbeat, not only at the stream's first.
	gone := &willowv1.NodeInfo{Id: "upload-a-9", Role: "upload", Region: "a", Addr: "127.0.0.1:9"}
	beat, answers = open(gone)
	for i := range 3 {
		if resp := next(beat, answers, "unknown node"); !resp.GetReregister() {
			t.Fatalf("heartbeat %d of an unknown node: %v, want reregister", i, resp)
		}
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
	reg, err := willowv1.NewMasterClient(dialMaster(t, m.addr, nodeCreds)).Register(ctx, &willowv1.RegisterRequest{Node: info})
	if err != nil {
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

	// With sparse answers, the same: heartbeats that are not answered,
	// then another node's, whose refusal ends the stream with its status
	// (the node that never read an answer reads that one).
	st, err = willowv1.NewMasterClient(dialMaster(t, m.addr, nodeCreds)).HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sparse := &willowv1.HeartbeatRequest{Node: info, Load: &willowv1.Load{SuccessRate: 1}, FlexVersion: reg.GetFlex().GetVersion(), SparseAnswers: true}
	for range 5 {
		if err := st.Send(sparse); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Send(&willowv1.HeartbeatRequest{Node: theirs, SparseAnswers: true}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.GetReregister() {
		t.Fatalf("first sparse heartbeat: %v %v, want its answer", resp, err)
	}
	_, err = st.Recv()
	wantStatus(t, "another node's sparse heartbeat", err, codes.PermissionDenied, auth.ReasonNodeIdentity)

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
	// Sparse answers: the stream's first heartbeat is answered, the
	// others have nothing to say.
	if n := counter(t, reg, "grpc_server_msg_sent_total", map[string]string{"grpc_method": "HeartbeatStream"}); n != 1 {
		t.Fatalf("%v answers on the heartbeat stream, want 1", n)
	}
	if !inRoute(m.client, "upload", "a", "upload-a-1") {
		t.Fatal("node not in Route")
	}
}

// TestNodeHeartbeatsDenseMaster: a node whose master answers every
// heartbeat on the stream (one that predates sparse answers: here the
// field is cleared on the way in) reads the answers as they come, and
// stays on its one stream and in Route.
func TestNodeHeartbeatsDenseMaster(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	dense := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod != willowv1.Master_HeartbeatStream_FullMethodName {
			return h(srv, ss)
		}
		return h(srv, denseStream{ss})
	}
	m := startAuthMaster(t, rdb, dense)
	runAuthNode(t, m.addr, 50*time.Millisecond)
	reg := m.node.Registry()
	sent := func() float64 {
		return counter(t, reg, "grpc_server_msg_sent_total", map[string]string{"grpc_method": "HeartbeatStream"})
	}
	regWait(t, 5*time.Second, "10 answers on the stream", func() bool { return sent() >= 10 })
	if o := counter(t, reg, "grpc_server_started_total", map[string]string{"grpc_method": "HeartbeatStream"}); o != 1 {
		t.Fatalf("%v heartbeat streams, want 1", o)
	}
	regWait(t, 2*time.Second, "node in Route", func() bool { return inRoute(m.client, "upload", "a", "upload-a-1") })
}

// runAuthNode runs node upload-a-1 with the cluster secret, heartbeating
// to the master at addr every interval, until the test's cleanup.
func runAuthNode(t *testing.T, addr string, interval time.Duration) {
	t.Helper()
	n, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", MasterAddr: addr,
		HeartbeatInterval: interval, ShutdownGrace: time.Second, HTTPAddr: "127.0.0.1:1", Logger: quiet(),
		Auth: &auth.Config{ClusterSecret: hbSecret}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, n.Run)
}

// denseStream clears sparse_answers in the heartbeats it receives.
type denseStream struct{ grpc.ServerStream }

func (d denseStream) RecvMsg(m any) error {
	err := d.ServerStream.RecvMsg(m)
	if req, ok := m.(*willowv1.HeartbeatRequest); ok {
		req.SparseAnswers = false
	}
	return err
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
			runAuthNode(t, m.addr, 100*time.Millisecond)
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
