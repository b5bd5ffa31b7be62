package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"willow/buffer"
	"willow/client"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/token"
	"willow/urlsign"
)

// extraNode is a node process this test starts from deploy/local's
// binaries, bound to 0.0.0.0 the way the Kubernetes manifests run them.
type extraNode struct {
	id, role   string
	grpc, http string // advertised addresses it must appear under
	cmd        *exec.Cmd
	log        string
	exited     chan error
}

// freeAnyPort is a TCP port free on 0.0.0.0.
func freeAnyPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startExtra runs DIR/bin/ROLE bound to 0.0.0.0 on fresh ports with
// args; advertise says how it learns its address: "flag" (-advertise,
// and -advertise-http for an edge) or "pod_ip" ($POD_IP only), ip being
// the loopback address it advertises.
func (c *localCluster) startExtra(t *testing.T, id, role, ip, advertise string, args ...string) *extraNode {
	t.Helper()
	gp, ap := freeAnyPort(t), freeAnyPort(t)
	n := &extraNode{id: id, role: role, grpc: fmt.Sprintf("%s:%d", ip, gp), log: filepath.Join(c.dir, "logs", id+".log"), exited: make(chan error, 1)}
	argv := []string{"-id", id, "-region", "c", "-grpc", fmt.Sprintf("0.0.0.0:%d", gp), "-admin", fmt.Sprintf("0.0.0.0:%d", ap),
		"-master", c.file.Master}
	// The credentials deploy/local's lib.sh gives its nodes through the
	// environment (docs/security.md): the node secret up.sh generated,
	// without which a node refuses to start, and the upload secret.
	secret, err := os.ReadFile(filepath.Join(c.dir, "run", "cluster-secret"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "POD_IP=", "WILLOW_CLUSTER_SECRET="+strings.TrimSpace(string(secret)),
		"WILLOW_UPLOAD_SECRET="+c.file.UploadSecret) // the edge checks client tokens with it

	if role == "edgecache" || role == "upload" { // edge GETs; the front's tus / IETF uploads
		hp := freeAnyPort(t)
		n.http = fmt.Sprintf("%s:%d", ip, hp)
		argv = append(argv, "-http", fmt.Sprintf("0.0.0.0:%d", hp))
		if advertise == "flag" {
			argv = append(argv, "-advertise-http", n.http)
		}
	}
	if advertise == "flag" {
		argv = append(argv, "-advertise", n.grpc)
	} else {
		env = append(env, "POD_IP="+ip)
	}
	lf, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(filepath.Join(c.dir, "bin", role), append(argv, args...)...)
	n.cmd.Env, n.cmd.Stdout, n.cmd.Stderr = env, lf, lf
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.exited <- n.cmd.Wait(); lf.Close() }()
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	})
	return n
}

// s3Args are the S3 flags deploy/local gives its nodes (the secret comes
// from $WILLOW_S3_SECRET_KEY, which lib.sh exports and this test sets).
func (c *localCluster) s3Args(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "run", "compress-a-1.cmd"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	var out []string
	for i := 0; i < len(f)-1; i++ {
		if strings.HasPrefix(f[i], "-s3-") {
			out = append(out, f[i], f[i+1])
		}
	}
	return out
}

// TestAdvertiseAndRetire is the multi-host rehearsal and the retire test
// on real processes: next to a deploy/local cluster it starts a region
// "c" whose upload front, compress worker and two edge caches bind
// 0.0.0.0 (as the manifests run them) and advertise loopback addresses
// that differ from their bind address, some through -advertise, some
// through $POD_IP. It checks that ListNodes, Route and the edge ring hand
// out only those addresses and that pool-2 reads through them work; then
// it fills the front's pool 2, SIGTERMs it, and proves every item reached
// the store with the same bytes, downloads, and was stored once.
func TestAdvertiseAndRetire(t *testing.T) {
	gate(t)
	c := startCluster(t)
	t.Setenv("WILLOW_S3_SECRET_KEY", "willowlocalsecret")
	s3 := c.s3Args(t)
	redisURL := c.file.Redis
	staging := filepath.Join(c.dir, "data", "upload-c-1")
	up := c.startExtra(t, "upload-c-1", "upload", "127.0.3.1", "flag", append([]string{"-secret", c.file.UploadSecret,
		"-redis", redisURL, "-staging", filepath.Join(staging, "staging"), "-pool-dir", filepath.Join(staging, "pools"),
		"-commit-wait", "2s"}, s3...)...)
	cp := c.startExtra(t, "compress-c-1", "compress", "127.0.3.11", "pod_ip", append([]string{"-workers", "1"}, s3...)...)
	edgeCfg := []string{"-config", filepath.Join(c.dir, "run", "edgecache.yaml"), "-capacity", strconv.Itoa(32 << 20)}
	e1 := c.startExtra(t, "edgecache-c-1", "edgecache", "127.0.3.21", "flag", append(edgeCfg, s3...)...)
	e2 := c.startExtra(t, "edgecache-c-2", "edgecache", "127.0.3.22", "pod_ip", append(edgeCfg, s3...)...)
	extra := []*extraNode{up, cp, e1, e2}
	defer func() {
		if t.Failed() {
			for _, n := range extra {
				b, _ := os.ReadFile(n.log)
				t.Logf("--- %s:\n%s", n.id, b[max(0, len(b)-3000):])
			}
		}
	}()
	if _, ok := c.waitFor(60*time.Second, func(ns map[string]*willowv1.NodeStatus) bool {
		for _, n := range extra {
			if ns[n.id].GetState() != "healthy" {
				return false
			}
		}
		return true
	}); !ok {
		t.Fatal("region c nodes not healthy within 60 s")
	}

	// Everything the master hands out is the advertised address.
	ns, err := c.nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		info := n.GetNode()
		for _, a := range []string{info.GetAddr(), info.GetHttpAddr(), info.GetAdminAddr()} {
			if a != "" && node.Unspecified(a) {
				t.Errorf("ListNodes: %s registered the unspecified address %s", info.GetId(), a)
			}
		}
	}
	for _, n := range extra {
		info := ns[n.id].GetNode()
		if info.GetAddr() != n.grpc || info.GetHttpAddr() != n.http || !strings.HasPrefix(info.GetAdminAddr(), strings.Split(n.grpc, ":")[0]+":") {
			t.Errorf("%s registered grpc %s http %q admin %s; advertised %s, %q", n.id, info.GetAddr(), info.GetHttpAddr(), info.GetAdminAddr(), n.grpc, n.http)
		}
	}
	router, err := client.NewRouter(client.RouterConfig{MasterAddr: c.file.Master, Region: "c"})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Route is a client's call: it carries the client's upload token.
	secret := []byte(c.file.UploadSecret)
	routeTok, err := token.Sign(secret, "u-retire", "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	routeCtx := client.WithToken(ctx, routeTok)
	for role, want := range map[string][]*extraNode{"upload": {up}, "compress": {cp}, "edgecache": {e1, e2}} {
		rr, err := router.Route(routeCtx, role, "")
		if err != nil {
			t.Fatalf("Route %s: %v", role, err)
		}
		got := map[string]string{}
		for _, ep := range rr.GetPrimary() {
			got[ep.GetNodeId()] = ep.GetAddr() + " " + ep.GetHttpAddr()
		}
		for _, ep := range append(rr.GetPrimary(), rr.GetSecondary()...) {
			if node.Unspecified(ep.GetAddr()) {
				t.Errorf("Route %s: unspecified address %s for %s", role, ep.GetAddr(), ep.GetNodeId())
			}
		}
		for _, n := range want {
			if got[n.id] != n.grpc+" "+n.http {
				t.Errorf("Route %s in region c: %s at %q, advertised %s %s", role, n.id, got[n.id], n.grpc, n.http)
			}
		}
	}

	// Pool 2 on upload-c-1: its items are read by the region-c edges
	// through the front's advertised address.
	keys, err := urlsign.New(c.file.URLKeys)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Router: router, CallTimeout: time.Minute, URLKeys: keys, Token: func(u, b string) (string, error) {
		return token.Sign(secret, u, b, time.Now().Add(time.Hour))
	}}
	if _, err := c.master.SetFlex(ctx, &willowv1.SetFlexRequest{Token: c.file.OncallToken, Knobs: map[string]string{"pool2": "force"}, Reason: "rehearsal: fill pool 2"}); err != nil {
		t.Fatal(err)
	}
	photo, err := os.ReadFile(filepath.Join(filepath.Dir(mustWd()), "..", "shared", "testdata", "photos", "Dragonfly_by_Bolly.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		r, err := cl.Upload(ctx, bytes.NewReader(photo), int64(len(photo)), client.UploadOptions{UploadID: fmt.Sprint("rehearsal-", i), User: "u-retire", Business: "moments", Filename: "p.jpg"})
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		if mid, _ := media.Parse(r.ID); mid.Loc != media.LocPool2 || mid.Node != up.id {
			t.Fatalf("upload %d landed at %s, want pool 2 of %s", i, r.ID, up.id)
		}
		ids = append(ids, r.ID)
	}
	if _, err := c.master.SetFlex(ctx, &willowv1.SetFlexRequest{Token: c.file.OncallToken, Knobs: map[string]string{"pool2": "auto"}, Reason: "rehearsal: done filling"}); err != nil {
		t.Fatal(err)
	}
	download := func(cl *client.Client, id string) []byte {
		t.Helper()
		var buf bytes.Buffer
		if _, err := cl.Download(ctx, id, "raw", &buf); err != nil {
			t.Errorf("download %s: %v", id, err)
		}
		return buf.Bytes()
	}
	for _, id := range ids {
		if got := download(cl, id); !bytes.Equal(got, photo) {
			t.Fatalf("pool-2 read of %s through region c: %d bytes, want %d", id, len(got), len(photo))
		}
	}

	// Retire: SIGTERM the front; it must exit by itself, pool 2 empty.
	rawDir := filepath.Join(c.dir, "data", "s3", "willow", "raw")
	before := countFiles(rawDir)
	start := time.Now()
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-up.exited:
		if err != nil {
			t.Fatalf("upload-c-1 after SIGTERM: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("upload-c-1 still running 2 min after SIGTERM")
	}
	logb, _ := os.ReadFile(up.log)
	if !bytes.Contains(logb, []byte("upload: retired")) || !bytes.Contains(logb, []byte("pool2_left=0")) {
		t.Errorf("upload-c-1 log shows no complete retire:\n%s", logb[max(0, len(logb)-2000):])
	}
	t.Logf("upload-c-1 retired and exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if left := countPoolItems(t, filepath.Join(staging, "pools", "pool2")); left != 0 {
		t.Errorf("pool 2 of the retired front still holds %d items", left)
	}
	for _, id := range ids {
		mid, _ := media.Parse(id)
		b, err := os.ReadFile(filepath.Join(c.dir, "data", "s3", "willow", media.RawKey(mid.Key)))
		if err != nil || !bytes.Equal(b, photo) {
			t.Errorf("%s: raw in the store: %d bytes, %v", id, len(b), err)
		}
	}
	if after := countFiles(rawDir); after != before+len(ids) {
		t.Errorf("store raw objects %d -> %d after retiring %d pool-2 items: duplicated or missing", before, after, len(ids))
	}
	// Downloadable after the front is gone, through the other region's
	// edges (nothing cached there), with the same bytes.
	ca := &client.Client{Router: c.router, CallTimeout: time.Minute, URLKeys: keys, Token: cl.Token}
	for _, id := range ids {
		if got := download(ca, id); !bytes.Equal(got, photo) {
			t.Errorf("download of %s after retire: %d bytes, want %d", id, len(got), len(photo))
		}
	}
}

// countFiles counts regular files under dir.
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// countPoolItems opens a (stopped) front's buffer pool and counts its
// items.
func countPoolItems(t *testing.T, dir string) int {
	t.Helper()
	p, err := buffer.Open(dir, buffer.Options{Name: "pool2"})
	if err != nil {
		t.Fatalf("open pool %s: %v", dir, err)
	}
	defer p.Close()
	return p.Stats().Items
}
