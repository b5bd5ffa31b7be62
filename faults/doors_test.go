package faults_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/client"
	"willow/edgecache"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/token"
	"willow/upload"
	"willow/urlsign"
)

// TestDownloadDoorsOnLocalCluster attacks the download and content doors
// of a cluster started as deploy/local starts one, from outside with raw
// HTTP and raw proto calls, and checks the legitimate path of each. It runs
// in `make test` (no WILLOW_FAULTS needed).
func TestDownloadDoorsOnLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts deploy/local")
	}
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	photoPath := "../../shared/testdata/photos/skimage_coffee.png"
	photo, err := os.ReadFile(photoPath)
	if err != nil {
		t.Fatal(err)
	}
	moments, err := c.client.UploadFile(client.WithRequest(ctx, "moments", "alice"), photoPath, client.UploadOptions{User: "alice", Business: "moments"})
	if err != nil {
		t.Fatal(err)
	}
	avatar, err := c.client.UploadFile(client.WithRequest(ctx, "avatar", "alice"), photoPath, client.UploadOptions{User: "alice", Business: "avatar", UploadID: "avatar-1"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := urlsign.New(c.file.URLKeys)
	if err != nil {
		t.Fatal(err)
	}
	edge := "http://" + c.file.Regions["a"].EdgecacheHTTP
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(edge + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	reason := func(b []byte) string {
		var e struct{ Reason string }
		_ = json.Unmarshal(b, &e)
		return e.Reason
	}
	signed := keys.URL(moments.ID, "raw", "alice", time.Now().Add(time.Minute))
	u, _ := url.Parse(signed)
	q := u.Query()
	q.Set("u", "mallory")
	tampered := u.Path + "?" + q.Encode()
	expired := keys.URL(moments.ID, "raw", "alice", time.Now().Add(-time.Minute))
	for _, tc := range []struct {
		name, path string
		code       int
		reason     string
	}{
		{"signed", signed, 200, ""},
		{"unsigned", urlsign.Path(moments.ID, "raw"), 403, edgecache.ReasonSignatureMissing},
		{"tampered user", tampered, 403, edgecache.ReasonSignatureInvalid},
		{"expired", expired, 403, edgecache.ReasonSignatureExpired},
		{"public business unsigned", urlsign.Path(avatar.ID, "raw"), 200, ""},
	} {
		t.Run("http "+tc.name, func(t *testing.T) {
			resp, body := get(tc.path)
			if resp.StatusCode != tc.code || reason(body) != tc.reason {
				t.Fatalf("status %d reason %q, want %d %q", resp.StatusCode, reason(body), tc.code, tc.reason)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("no nosniff: %v", resp.Header)
			}
			if tc.code == 200 && (resp.Header.Get("Content-Type") != "image/png" || string(body) != string(photo)) {
				t.Fatalf("served %s, %d bytes", resp.Header.Get("Content-Type"), len(body))
			}
		})
	}

	// gRPC EdgeCache/Get, raw proto, with alice's upload token as a client
	// credential: no signature is no download either.
	tok, err := token.Sign(c.secret, "alice", "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.file.Regions["a"].EdgecacheGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ec := willowv1.NewEdgeCacheClient(conn)
	fetch := func(req *willowv1.GetRequest) ([]byte, error) {
		st, err := ec.Get(ctx, req)
		if err != nil {
			return nil, err
		}
		var b []byte
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return b, nil
			}
			if err != nil {
				return nil, err
			}
			b = append(b, m.GetData()...)
		}
	}
	sig := keys.Sign(moments.ID, "raw", "alice", time.Now().Add(time.Minute))
	if b, err := fetch(&willowv1.GetRequest{MediaId: moments.ID, Variant: "raw", Signature: &willowv1.UrlSignature{
		KeyId: sig.KeyID, ExpiresUnix: sig.Expires, User: sig.User, Mac: sig.MAC}}); err != nil || string(b) != string(photo) {
		t.Fatalf("grpc signed: %d bytes, %v", len(b), err)
	}
	for name, req := range map[string]*willowv1.GetRequest{
		"unsigned":       {MediaId: moments.ID, Variant: "raw"},
		"unsigned, peer": {MediaId: moments.ID, Variant: "raw", Peer: true},
	} {
		if _, err := fetch(req); status.Code(err) != codes.PermissionDenied || rpcstatus.Reason(err) != edgecache.ReasonSignatureMissing {
			t.Errorf("grpc %s: %v (reason %q), want PERMISSION_DENIED signature_missing", name, err, rpcstatus.Reason(err))
		}
	}

	// An HTML page posing as a photo, raw proto: refused before any
	// acknowledgement.
	html := []byte("<!DOCTYPE html><html><script>alert(document.cookie)</script></html>" + strings.Repeat(" ", 600))
	uconn, err := grpc.NewClient(c.file.Regions["a"].Upload, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer uconn.Close()
	uc := willowv1.NewUploadClient(uconn)
	sum := sha256.Sum256(html)
	if _, err := uc.Begin(ctx, &willowv1.BeginRequest{UploadId: "xss-1", Token: tok, Business: "moments", User: "alice",
		Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(html)), Sha256: hex.EncodeToString(sum[:]), ContentType: "text/html"}); err != nil {
		t.Fatal(err)
	}
	cs, err := uc.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.Send(&willowv1.Chunk{UploadId: "xss-1", User: "alice", Data: html})
	if _, err := cs.CloseAndRecv(); status.Code(err) != codes.InvalidArgument || rpcstatus.Reason(err) != upload.ReasonUnsupportedFormat {
		t.Fatalf("html chunks: %v, want INVALID_ARGUMENT unsupported_format", err)
	}
	if _, err := uc.Commit(ctx, &willowv1.CommitRequest{UploadId: "xss-1", User: "alice"}); err == nil {
		t.Fatal("html committed")
	}
}
