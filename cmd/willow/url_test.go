package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestURLCLI: willow url prints a signed edge URL that the edge serves,
// and that willow download takes in place of an ID; the bare URL is
// refused.
func TestURLCLI(t *testing.T) {
	_, cf := testCluster(t)
	photo := "../../../shared/testdata/photos/mate_Storm.jpg"
	out, errs, code := run(t, "upload", "--cluster", cf, "--upload-id", "url-1", "--user", "bob", photo)
	if code != 0 {
		t.Fatalf("upload exit %d: %s", code, errs)
	}
	id := out[strings.Index(out, `"id":"`)+6:]
	id = id[:strings.IndexByte(id, '"')]
	u, errs, code := run(t, "url", "--cluster", cf, id, "--variant", "raw", "--for", "5m", "--user", "bob")
	if code != 0 || !strings.HasPrefix(u, "http://") || !strings.Contains(u, "kid=") {
		t.Fatalf("url exit %d: %q %s", code, u, errs)
	}
	u = strings.TrimSpace(u)
	want, _ := os.ReadFile(photo)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET signed url: %d, %d bytes", resp.StatusCode, len(body))
	}
	bare, _, _ := strings.Cut(u, "?")
	if resp, err := http.Get(bare); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET unsigned: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	dst := filepath.Join(t.TempDir(), "raw.jpg")
	if _, errs, code := run(t, "download", "--cluster", cf, u, "-o", dst); code != 0 {
		t.Fatalf("download URL exit %d: %s", code, errs)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, want) {
		t.Fatal("downloaded bytes differ")
	}
	if _, errs, code := run(t, "url", "--cluster", cf, "not-an-id"); code != 2 {
		t.Fatalf("bad id: exit %d %s", code, errs)
	}
}
