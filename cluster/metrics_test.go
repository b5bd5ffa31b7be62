package cluster_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"willow/client"
)

// TestEveryRegistryPassesLint gathers every node's registry of a one-box
// cluster (master, upload, compress, edgecache, timeline) and runs
// client_golang's linter on it: the rules `promtool check metrics` applies.
func TestEveryRegistryPassesLint(t *testing.T) {
	c := startCluster(t)
	// Some traffic first, so histograms and per-code series exist: one
	// upload, its thumb over the edge's HTTP, and a 404.
	up := newClient(t, c, "a")
	res, err := up.UploadFile(context.Background(), filepath.Join(photosDir, lintPhoto), client.UploadOptions{User: "lint", Business: "moments"})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	edge := c.File.Regions["a"].EdgecacheHTTP
	waitHTTP(t, "http://"+edge+urlKeys(t, c).URL(res.ID, "thumb", "lint", time.Now().Add(time.Hour)))
	if resp, err := http.Get("http://" + edge + "/nope"); err == nil {
		resp.Body.Close()
	}
	en := c.Node("edgecache-a-1")
	if v := testutil.ToFloat64(counterOf(t, en.Registry(), "willow_edgecache_http_requests_total", "code", "200")); v < 1 {
		t.Errorf("willow_edgecache_http_requests_total{code=200} = %v after a download", v)
	}
	if v := testutil.ToFloat64(counterOf(t, en.Registry(), "willow_edgecache_http_requests_total", "code", "404")); v < 1 {
		t.Errorf("willow_edgecache_http_requests_total{code=404} = %v after a 404", v)
	}
	if n, err := testutil.GatherAndCount(en.Registry(), "willow_edgecache_http_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("latency histogram: %d series, %v", n, err)
	}
	nodes := c.Nodes()
	if len(nodes) < 8 {
		t.Fatalf("%d nodes, want the master, 3 per region and the timeline", len(nodes))
	}
	mr := c.Node("master-1").Registry()
	own, held := gaugeOf(t, mr, "willow_flex_version"), gaugeOf(t, mr, "willow_master_flex_version")
	if own < 1 || own != held {
		t.Errorf("master: willow_flex_version %v, willow_master_flex_version %v: want equal, >= 1", own, held)
	}
	// cluster.json lists every node, the master too, with the admin
	// address its /metrics answers on.
	if len(c.File.Nodes) != len(nodes) {
		t.Errorf("cluster.json lists %d nodes, the cluster runs %d", len(c.File.Nodes), len(nodes))
	}
	for _, fn := range c.File.Nodes {
		resp, err := http.Get("http://" + fn.Admin + "/metrics")
		if err != nil {
			t.Errorf("%s: cluster.json admin %q: %v", fn.ID, fn.Admin, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `willow_build_info{`) {
			t.Errorf("%s: GET %s/metrics = %d", fn.ID, fn.Admin, resp.StatusCode)
		}
	}
	for _, n := range nodes {
		if k, err := testutil.GatherAndCount(n.Registry(), "willow_build_info"); err != nil || k != 1 {
			t.Errorf("%s: willow_build_info: %d series, %v", n.Config().ID, k, err)
		}
		probs, err := testutil.GatherAndLint(n.Registry())
		if err != nil {
			t.Fatalf("%s: gather: %v", n.Config().ID, err)
		}
		for _, p := range probs {
			t.Errorf("%s: %s: %s", n.Config().ID, p.Metric, p.Text)
		}
	}
}

// metricRef is a metric name in the docs, with the label values they list
// as {label=v1|v2}.
var metricRef = regexp.MustCompile(`willow_[a-z0-9_]*[a-z0-9](\{[^}]*\})?`)

// TestDocNamedMetricsExistFromStart reads every metric name README.md and
// docs/*.md give (willow_...) and checks that a freshly started cluster,
// before any traffic, exports each, with every label value the docs list
// as {label=a|b}: a counter an operator greps for reads 0, not "no data".
func TestDocNamedMetricsExistFromStart(t *testing.T) {
	c := startCluster(t)
	// family -> label -> values present
	have := map[string]map[string]map[string]bool{}
	for _, n := range c.Nodes() {
		mfs, err := n.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if have[mf.GetName()] == nil {
				have[mf.GetName()] = map[string]map[string]bool{}
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if have[mf.GetName()][lp.GetName()] == nil {
						have[mf.GetName()][lp.GetName()] = map[string]bool{}
					}
					have[mf.GetName()][lp.GetName()][lp.GetValue()] = true
				}
			}
		}
	}
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range metricRef.FindAllString(string(b), -1) {
			name, labels, _ := strings.Cut(ref, "{")
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if _, ok := have[name]; !ok {
					name = strings.TrimSuffix(name, suf)
				}
			}
			fam, ok := have[name]
			if !ok {
				t.Errorf("%s names %s: not exported by any node at start", filepath.Base(f), name)
				continue
			}
			checked++
			for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				k, vs, ok := strings.Cut(kv, "=")
				if !ok || strings.HasPrefix(vs, `"`) { // {a="x"} is sample output, not a list
					continue
				}
				for _, v := range strings.Split(vs, "|") {
					if !fam[strings.TrimSpace(k)][strings.TrimSpace(v)] {
						t.Errorf("%s names %s{%s=%s}: no such series at start", filepath.Base(f), name, k, v)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d metric names found in the docs", checked)
	}
}

const lintPhoto = "plasma_DarkestHour.jpg"

// counterOf returns the sum of family name's series whose label is value,
// as a collector testutil.ToFloat64 reads.
func counterOf(t *testing.T, g prometheus.Gatherer, name, label, value string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sum"}, func() float64 { return sum })
}

// gaugeOf returns the value of the unlabelled gauge name in g.
func gaugeOf(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
