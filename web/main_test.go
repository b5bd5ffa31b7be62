package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"willow/cluster"
	willowv1 "willow/proto/willow/v1"
	"willow/token"
	"willow/urlsign"
)

// stagingTTL is the shared cluster's staging TTL: the expiry test waits it
// out (in parallel with the others, whose uploads finish well within it).
const stagingTTL = 30 * time.Second

const photosDir = "../../shared/testdata/photos"

var (
	clusterOnce sync.Once
	shared      *cluster.Cluster
	sharedErr   error
	sharedDir   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// live returns the package's one-box cluster, started on first use.
func live(t *testing.T) *cluster.Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: run scripts/setup.sh (make setup)")
	}
	clusterOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "willow-web-")
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		shared, sharedErr = cluster.Start(ctx, cluster.Config{Dir: sharedDir, HeartbeatInterval: 200 * time.Millisecond,
			StagingTTL: stagingTTL, Logger: quiet})
	})
	if sharedErr != nil {
		t.Fatalf("start cluster: %v", sharedErr)
	}
	return shared
}

// nodeBin is node, and checks that setup installed tus-js-client.
func nodeBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: the stock-client tests need Node.js >= 18 and tus-js-client; run scripts/setup.sh (make setup)")
	}
	if _, err := os.Stat("node_modules/tus-js-client/package.json"); err != nil {
		t.Fatal("web/node_modules/tus-js-client missing: run scripts/setup.sh (make setup), which runs npm ci in web/")
	}
	return p
}

func sign(t *testing.T, c *cluster.Cluster, user, business string) string {
	t.Helper()
	tok, err := token.Sign([]byte(c.File.UploadSecret), user, business, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// event is one line of tus/upload.mjs.
type event struct {
	Event      string `json:"event"`
	Accepted   int64  `json:"accepted"`
	Attempt    int    `json:"attempt"`
	Status     int    `json:"status"`
	Body       string `json:"body"`
	RetryAfter string `json:"retryAfter"`
	URL        string `json:"url"`
	MediaID    string `json:"mediaId"`
	Location   string `json:"location"`
	Region     string `json:"region"`
	Message    string `json:"message"`
}

type events []event

func (es events) last(kind string) (event, bool) {
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Event == kind {
			return es[i], true
		}
	}
	return event{}, false
}

func (es events) count(kind string) int {
	n := 0
	for _, e := range es {
		if e.Event == kind {
			n++
		}
	}
	return n
}

// tusJS runs one upload with the stock tus-js-client under Node.
func tusJS(t *testing.T, opt map[string]any) events {
	t.Helper()
	bin := nodeBin(t)
	arg, _ := json.Marshal(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "tus/upload.mjs", string(arg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // a failed upload exits 1 after its error event
	var es events
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("tus-js-client printed %q: %v (stderr: %s)", sc.Text(), err, stderr.String())
		}
		es = append(es, e)
	}
	if len(es) == 0 {
		t.Fatalf("tus-js-client printed nothing (stderr: %s)", stderr.String())
	}
	return es
}

// counter reads a counter of the node's registry (labels must all match).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func bodyBytes(t *testing.T, c *cluster.Cluster, region string) float64 {
	return counter(t, c.Node("upload-"+region+"-1").Registry(), "willow_upload_http_body_bytes_total", nil)
}

// waitGET GETs url until it answers 200 (variants appear once compress has
// made them) or 90 s pass.
func waitGET(t *testing.T, url string) []byte {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				return body
			}
			err = fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// cutProxy forwards TCP to target; the next connection is cut (both
// sides closed) after cut bytes from the client, once, when cut > 0.
type cutProxy struct {
	lis    net.Listener
	target string
	cut    atomic.Int64
	conns  atomic.Int64
	// hold: a cut connection stays open this long after its last
	// forwarded byte (answers still flow back), as a stalled network.
	hold time.Duration
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	return p
}

func (p *cutProxy) handle(c net.Conn) {
	defer c.Close()
	p.conns.Add(1)
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { _, _ = io.Copy(c, u); c.Close() }()
	if n := p.cut.Swap(0); n > 0 {
		_, _ = io.CopyN(u, c, n)
		time.Sleep(p.hold)
		return // cut: both sides close
	}
	_, _ = io.Copy(u, c)
}

// url is the proxy's URL for an upload base URL.
func (p *cutProxy) url(base string) string {
	i := strings.Index(base[len("http://"):], "/")
	return "http://" + p.lis.Addr().String() + base[len("http://")+i:]
}

// edgeURL is a signed URL of one variant on region's edge, for user.
func edgeURL(t *testing.T, c *cluster.Cluster, region, mediaID, variant, user string) string {
	t.Helper()
	kr, err := urlsign.New(c.File.URLKeys)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + c.File.Regions[region].EdgecacheHTTP + kr.URL(mediaID, variant, user, time.Now().Add(time.Hour))
}

func setKnobs(t *testing.T, c *cluster.Cluster, kv map[string]string) {
	t.Helper()
	_, err := c.Master.SetFlex(context.Background(), &willowv1.SetFlexRequest{Token: c.File.OncallToken, Knobs: kv, Reason: "web test", Actor: "web-test"})
	if err != nil {
		t.Fatalf("set knobs %v: %v", kv, err)
	}
}

func photo(t *testing.T, name string) (string, []byte) {
	t.Helper()
	p := filepath.Join(photosDir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (the tests need ../shared/testdata beside the repo)", err)
	}
	abs, _ := filepath.Abs(p)
	return abs, b
}
