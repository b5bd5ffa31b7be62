package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/client"
	"willow/cluster"
	"willow/internal/testenv"
	"willow/token"
	"willow/urlsign"
)

const photosDir = "../../shared/testdata/photos"

// startCluster starts a one-box cluster in a temp dir for one test.
func startCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	testenv.LookPath(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, c *cluster.Cluster, region string) *client.Client {
	t.Helper()
	r, err := client.NewRouter(client.RouterConfig{MasterAddr: c.File.Master, Region: region})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	secret := []byte(c.File.UploadSecret)
	return &client.Client{Router: r, URLKeys: urlKeys(t, c), Token: func(u, b string) (string, error) {
		return token.Sign(secret, u, b, time.Now().Add(time.Hour))
	}}
}

// urlKeys is the cluster's download URL keyring (cluster.json url_keys).
func urlKeys(t *testing.T, c *cluster.Cluster) *urlsign.Keyring {
	t.Helper()
	k, err := urlsign.New(c.File.URLKeys)
	if err != nil {
		t.Fatalf("cluster.json url_keys: %v", err)
	}
	return k
}

// dims decodes an image's dimensions; HEIC goes through heif-convert.
func dims(t *testing.T, data []byte, contentType string) (int, int) {
	t.Helper()
	if contentType == "image/heic" || contentType == "image/heif" {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in.heic"), filepath.Join(dir, "out.png")
		if err := os.WriteFile(in, data, 0o644); err != nil {
			t.Fatal(err)
		}
		bin := testenv.LookPath(t, "heif-convert")
		if b, err := exec.Command(bin, in, out).CombinedOutput(); err != nil {
			t.Fatalf("heif-convert: %v: %s", err, b)
		}
		var err error
		if data, err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode %s: %v", contentType, err)
	}
	return cfg.Width, cfg.Height
}

// wantDims returns the expected size of a preset with long edge max from a
// w x h source: never upscaled, aspect kept.
func wantLong(w, h, max int) int {
	long := w
	if h > long {
		long = h
	}
	if long < max {
		return long
	}
	return max
}

func TestOneBoxUploadDownloadEveryPhoto(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	entries, err := os.ReadDir(photosDir)
	if err != nil {
		t.Fatalf("photos: %v (the tests need ../shared/testdata beside the repo)", err)
	}
	up := newClient(t, c, "a")
	keys := urlKeys(t, c)
	presets := map[string]int{"thumb": 240, "medium": 1080, "large": 1920}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".jpg") && !strings.HasSuffix(name, ".png") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(photosDir, name)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			src, _, err := image.DecodeConfig(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			res, err := up.UploadFile(ctx, path, client.UploadOptions{User: "e2e", Business: "moments"})
			if err != nil {
				t.Fatalf("upload: %v", err)
			}
			sum := sha256.Sum256(raw)
			if res.SHA256 != hex.EncodeToString(sum[:]) || res.Bytes != int64(len(raw)) {
				t.Fatalf("upload result %+v does not match the file", res)
			}
			// Same upload ID again: same media.
			again, err := up.UploadFile(ctx, path, client.UploadOptions{User: "e2e", Business: "moments"})
			if err != nil || again.ID != res.ID {
				t.Fatalf("re-upload: id %v err %v, want %s", again, err, res.ID)
			}
			for _, region := range []string{"a", "b"} {
				reg := c.File.Regions[region]
				for variant, max := range presets {
					body, ctype := waitHTTP(t, "http://"+reg.EdgecacheHTTP+keys.URL(res.ID, variant, "e2e", time.Now().Add(time.Hour)))
					w, h := dims(t, body, ctype)
					long := w
					if h > long {
						long = h
					}
					if want := wantLong(src.Width, src.Height, max); long != want {
						t.Errorf("%s via %s HTTP: %dx%d, want long edge %d (source %dx%d)", variant, region, w, h, want, src.Width, src.Height)
					}
					// The same bytes over gRPC.
					var buf bytes.Buffer
					dl := newClient(t, c, region)
					head, err := dl.Download(ctx, res.ID, variant, &buf)
					if err != nil {
						t.Fatalf("%s via %s gRPC: %v", variant, region, err)
					}
					if !bytes.Equal(buf.Bytes(), body) || head.GetContentType() != ctype {
						t.Errorf("%s via %s: gRPC bytes (%d, %s) differ from HTTP (%d, %s)", variant, region, buf.Len(), head.GetContentType(), len(body), ctype)
					}
				}
				rawBody, _ := waitHTTP(t, "http://"+reg.EdgecacheHTTP+keys.URL(res.ID, "raw", "e2e", time.Now().Add(time.Hour)))
				if !bytes.Equal(rawBody, raw) {
					t.Errorf("raw via %s differs from the uploaded file", region)
				}
				// moments downloads are signed: the bare URL is refused.
				if resp, err := http.Get(fmt.Sprintf("http://%s/m/%s/raw", reg.EdgecacheHTTP, res.ID)); err != nil || resp.StatusCode != http.StatusForbidden {
					t.Errorf("unsigned raw via %s: %v %v, want 403", region, resp, err)
				} else {
					resp.Body.Close()
				}
			}
		})
	}
}

// waitHTTP GETs url until it answers 200 (variants appear once compress has
// made them) or 60 s pass.
func waitHTTP(t *testing.T, url string) ([]byte, string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				return body, resp.Header.Get("Content-Type")
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestOneBoxBadRequests(t *testing.T) {
	c := startCluster(t)
	edge := c.File.Regions["a"].EdgecacheHTTP
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/m/not-an-id/medium", http.StatusBadRequest},
		{"/m/s.a.upload-a-1.00000000000000000000000000000000/medium", http.StatusNotFound},
		{"/m/s.a.upload-a-1.00000000000000000000000000000000/nonsense", http.StatusBadRequest},
	} {
		resp, err := http.Get("http://" + edge + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
}

func TestOneBoxReflectionListsServices(t *testing.T) {
	c := startCluster(t)
	bin := testenv.LookPath(t, "grpcurl")
	addrs := []string{c.File.Master, c.File.Timeline}
	for _, r := range c.File.Regions {
		addrs = append(addrs, r.Upload, r.Compress, r.EdgecacheGRPC)
	}
	for _, addr := range addrs {
		out, err := exec.Command(bin, "-plaintext", addr, "list").CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl list %s: %v: %s", addr, err, out)
		}
		if !strings.Contains(string(out), "grpc.health.v1.Health") || !strings.Contains(string(out), "willow.v1.") {
			t.Errorf("grpcurl list %s: %s", addr, out)
		}
	}
	out, err := exec.Command(bin, "-plaintext", c.File.Master, "grpc.health.v1.Health/Check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SERVING") {
		t.Errorf("health check: %v: %s", err, out)
	}
	// Health by service name: each node answers for the service it runs,
	// and NOT_FOUND for one it does not.
	byName := map[string]string{c.File.Master: "willow.v1.Master", c.File.Timeline: "willow.v1.Timeline"}
	for _, r := range c.File.Regions {
		byName[r.Upload], byName[r.Compress], byName[r.EdgecacheGRPC] = "willow.v1.Upload", "willow.v1.Compress", "willow.v1.EdgeCache"
	}
	for addr, svc := range byName {
		out, err := exec.Command(bin, "-plaintext", "-d", `{"service":"`+svc+`"}`, addr, "grpc.health.v1.Health/Check").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"SERVING"`) {
			t.Errorf("health check %s at %s: %v: %s", svc, addr, err, out)
		}
	}
	out, err = exec.Command(bin, "-plaintext", "-d", `{"service":"willow.v1.Upload"}`, c.File.Master, "grpc.health.v1.Health/Check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "NotFound") {
		t.Errorf("health check of willow.v1.Upload on the master: %v: %s, want NotFound", err, out)
	}
}
