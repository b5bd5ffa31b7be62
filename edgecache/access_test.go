package edgecache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/edgecache"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/store"
	"willow/token"
	"willow/urlsign"
)

// putRecord stores the media record the upload front writes, naming the
// item's business.
func putRecord(t *testing.T, st store.Store, id media.ID, business string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"id": id.String(), "business": business, "user": "alice"})
	if err := st.Put(context.Background(), media.RecordKey(id.Key), bytes.NewReader(b), int64(len(b)), "application/json"); err != nil {
		t.Fatal(err)
	}
}

// TestDownloadDoors attacks the edge's download doors from outside, with
// raw HTTP requests and raw EdgeCache.Get calls (no SDK), and checks the
// legitimate path through each door.
func TestDownloadDoors(t *testing.T) {
	st := newStore(t)
	photo, err := os.ReadFile("../compress/testdata/orient-1.jpg")
	if err != nil {
		t.Fatal(err)
	}
	moments := put(t, st, media.LocStore, 1, media.VariantThumb, "image/jpeg", photo)
	putRecord(t, st, moments, "moments")
	avatar := put(t, st, media.LocStore, 2, media.VariantThumb, "image/jpeg", photo)
	putRecord(t, st, avatar, "avatar")
	html := []byte("<!DOCTYPE html><html><script>alert(document.cookie)</script></html>")
	page := put(t, st, media.LocStore, 3, media.VariantRaw, "text/html", html)
	putRecord(t, st, page, "moments")
	pageAvatar := put(t, st, media.LocStore, 4, media.VariantRaw, "text/html; charset=utf-8", html)
	putRecord(t, st, pageAvatar, "avatar")

	now := time.Unix(1_800_000_000, 0)
	oldKey := urlsign.Key{ID: "k1", Secret: strings.Repeat("1", 32)}
	newKey := urlsign.Key{ID: "k2", Secret: strings.Repeat("2", 32)}
	// The edge is mid-rotation: k2 signs from now on, k1's URLs still work.
	e := startEdge(t, "edge-a-1", edgecache.Config{URLKeys: []urlsign.Key{newKey, oldKey}, PublicBusinesses: []string{"avatar"}},
		edgecache.Deps{Store: st, Now: func() time.Time { return now }})
	signer := func(k ...urlsign.Key) *urlsign.Keyring {
		r, err := urlsign.New(k)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	current, previous := signer(newKey), signer(oldKey)
	attacker := signer(urlsign.Key{ID: "k2", Secret: strings.Repeat("x", 32)}) // guessed secret, real key ID
	stranger := signer(urlsign.Key{ID: "k9", Secret: strings.Repeat("9", 32)})
	exp := now.Add(time.Hour)
	good := current.Sign(moments.String(), "thumb", "bob", exp)
	tampered := func(f func(*urlsign.Signature)) urlsign.Signature { s := good; f(&s); return s }

	conn, err := node.Dial(e.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ec := willowv1.NewEdgeCacheClient(conn)

	cases := []struct {
		name    string
		id      media.ID
		variant string
		sig     urlsign.Signature
		reason  string // "" = served
		ctype   string
		private bool
	}{
		{name: "signed", id: moments, variant: "thumb", sig: good, ctype: "image/jpeg", private: true},
		{name: "signed with the previous key (rotation)", id: moments, variant: "thumb",
			sig: previous.Sign(moments.String(), "thumb", "bob", exp), ctype: "image/jpeg", private: true},
		{name: "unsigned", id: moments, variant: "thumb", reason: edgecache.ReasonSignatureMissing},
		{name: "expired", id: moments, variant: "thumb", sig: current.Sign(moments.String(), "thumb", "bob", now.Add(-time.Second)),
			reason: edgecache.ReasonSignatureExpired},
		{name: "expiry pushed later", id: moments, variant: "thumb",
			sig: tampered(func(s *urlsign.Signature) { s.Expires += 86400 }), reason: edgecache.ReasonSignatureInvalid},
		{name: "user changed", id: moments, variant: "thumb",
			sig: tampered(func(s *urlsign.Signature) { s.User = "eve" }), reason: edgecache.ReasonSignatureInvalid},
		{name: "mac changed", id: moments, variant: "thumb",
			sig: tampered(func(s *urlsign.Signature) { s.MAC = strings.Repeat("A", len(s.MAC)) }), reason: edgecache.ReasonSignatureInvalid},
		{name: "another variant's signature", id: moments, variant: "raw", sig: good, reason: edgecache.ReasonSignatureInvalid},
		{name: "another media's signature", id: avatar, variant: "thumb", sig: good, reason: edgecache.ReasonSignatureInvalid},
		{name: "signed with a guessed secret", id: moments, variant: "thumb",
			sig: attacker.Sign(moments.String(), "thumb", "bob", exp), reason: edgecache.ReasonSignatureInvalid},
		{name: "signed with another key", id: moments, variant: "thumb",
			sig: stranger.Sign(moments.String(), "thumb", "bob", exp), reason: edgecache.ReasonSignatureUnknownKey},
		{name: "public business unsigned", id: avatar, variant: "thumb", ctype: "image/jpeg"},
		{name: "public business with a bad signature", id: avatar, variant: "thumb",
			sig: attacker.Sign(avatar.String(), "thumb", "", exp), reason: edgecache.ReasonSignatureInvalid},
		{name: "html stored as text/html, signed", id: page, variant: "raw",
			sig: current.Sign(page.String(), "raw", "bob", exp), ctype: "application/octet-stream", private: true},
		{name: "html stored as text/html, public", id: pageAvatar, variant: "raw", ctype: "application/octet-stream"},
	}
	for _, c := range cases {
		t.Run("http/"+c.name, func(t *testing.T) {
			u := e.url + urlsign.Path(c.id.String(), c.variant)
			if !c.sig.IsZero() {
				u += "?" + c.sig.Encode()
			}
			resp, body := get(t, u, map[string]string{edgecache.HeaderBusiness: "avatar"}) // the claimed business counts for nothing
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q", got)
			}
			if c.reason != "" {
				var e struct{ Reason string }
				_ = json.Unmarshal(body, &e)
				if resp.StatusCode != http.StatusForbidden || e.Reason != c.reason {
					t.Fatalf("status %d %s, want 403 reason %s", resp.StatusCode, body, c.reason)
				}
				return
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, body)
			}
			ct := resp.Header.Get("Content-Type")
			if ct != c.ctype || strings.Contains(ct, "html") {
				t.Fatalf("Content-Type %q, want %q", ct, c.ctype)
			}
			disp := resp.Header.Get("Content-Disposition")
			if media := strings.HasPrefix(ct, "image/"); media == (disp == "attachment") {
				t.Fatalf("Content-Disposition %q for %s", disp, ct)
			}
			if cc := resp.Header.Get("Cache-Control"); strings.HasPrefix(cc, "private") != c.private {
				t.Fatalf("Cache-Control %q (private %v)", cc, c.private)
			}
		})
		t.Run("grpc/"+c.name, func(t *testing.T) {
			stream, err := ec.Get(context.Background(), &willowv1.GetRequest{MediaId: c.id.String(), Variant: c.variant, Signature: edgecache.SignatureProto(c.sig)})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			var ct string
			for {
				m, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					if c.reason == "" || status.Code(err) != codes.PermissionDenied || rpcstatus.Reason(err) != c.reason {
						t.Fatalf("Get: %v (reason %q), want PERMISSION_DENIED %q", err, rpcstatus.Reason(err), c.reason)
					}
					return
				}
				if ct == "" {
					ct = m.GetContentType()
				}
				got = append(got, m.GetData()...)
			}
			if c.reason != "" {
				t.Fatalf("served %d bytes, want PERMISSION_DENIED %s", len(got), c.reason)
			}
			if ct != c.ctype || len(got) == 0 {
				t.Fatalf("content type %q, %d bytes", ct, len(got))
			}
		})
	}

	// The signature is not part of the cache key: two users' URLs for one
	// object, signed with two keys, read the store once between them.
	fresh := put(t, st, media.LocStore, 5, media.VariantMedium, "image/jpeg", photo)
	before := st.gets.Load()
	for i, kr := range []*urlsign.Keyring{current, previous} {
		u := fmt.Sprintf("%s%s", e.url, kr.URL(fresh.String(), "medium", fmt.Sprint("user", i), exp))
		if resp, body := get(t, u, nil); resp.StatusCode != 200 || !bytes.Equal(body, photo) {
			t.Fatalf("%s: status %d", u, resp.StatusCode)
		}
	}
	if n := st.gets.Load() - before; n != 1 {
		t.Fatalf("%d store reads for one object under two signatures, want 1", n)
	}

	// Refusals name no object and carry nosniff too.
	resp, _ := get(t, e.url+"/m/"+moments.String()+"/thumb?exp=1&kid=k2&sig=x", nil)
	if resp.StatusCode != 403 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("malformed signature: status %d", resp.StatusCode)
	}
}

// TestUnsignedEdge: without keys (development) every download is served,
// still with the content-safety headers.
func TestUnsignedEdge(t *testing.T) {
	st := newStore(t)
	page := put(t, st, media.LocStore, 1, media.VariantRaw, "text/html", []byte("<html><script>alert(1)</script>"))
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	resp, _ := get(t, e.url+path(page, media.VariantRaw), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.Header.Get("Content-Disposition") != "attachment" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if _, err := edgecache.New(edgecache.Config{URLKeys: []urlsign.Key{{ID: "k", Secret: "short"}}}, edgecache.Deps{Node: e.node, Store: st}); err == nil {
		t.Fatal("New took a short key")
	}
}

// TestPeerFlagOnlyForNodes: peer=true skips the signature check only for a
// node; a client setting it is checked like any other download.
func TestPeerFlagOnlyForNodes(t *testing.T) {
	st := newStore(t)
	photo, err := os.ReadFile("../compress/testdata/orient-1.jpg")
	if err != nil {
		t.Fatal(err)
	}
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/jpeg", photo)
	putRecord(t, st, id, "moments")
	key := urlsign.Key{ID: "k1", Secret: strings.Repeat("1", 32)}
	upSecret := []byte("upload-secret")
	e := startEdgeNode(t, node.Config{ID: "edge-a-1", Role: "edgecache", Region: "a",
		Auth: &auth.Config{ClusterSecret: "cluster-secret", UploadSecret: upSecret}},
		edgecache.Config{URLKeys: []urlsign.Key{key}}, edgecache.Deps{Store: st})
	tok, err := token.Sign(upSecret, "mallory", "moments", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kr, _ := urlsign.New([]urlsign.Key{key})
	get := func(t *testing.T, creds credentials.PerRPCCredentials, req *willowv1.GetRequest) error {
		conn, err := grpc.NewClient(e.node.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := willowv1.NewEdgeCacheClient(conn).Get(context.Background(), req)
		if err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	client := auth.Bearer(tok)
	peer := auth.NodeCredentials{Secret: "cluster-secret", ID: "edge-a-2", Role: "edgecache", Instance: "i"}
	for _, c := range []struct {
		name   string
		creds  credentials.PerRPCCredentials
		req    *willowv1.GetRequest
		code   codes.Code
		reason string
	}{
		{"client sets peer", client, &willowv1.GetRequest{MediaId: id.String(), Variant: "thumb", Peer: true}, codes.PermissionDenied, edgecache.ReasonSignatureMissing},
		{"client signed", client, &willowv1.GetRequest{MediaId: id.String(), Variant: "thumb",
			Signature: edgecache.SignatureProto(kr.Sign(id.String(), "thumb", "mallory", time.Now().Add(time.Minute)))}, codes.OK, ""},
		{"no credentials", auth.Bearer(""), &willowv1.GetRequest{MediaId: id.String(), Variant: "thumb", Peer: true}, codes.Unauthenticated, ""},
		{"forged cluster secret", auth.NodeCredentials{Secret: "guess", ID: "edge-a-2", Role: "edgecache", Instance: "i"},
			&willowv1.GetRequest{MediaId: id.String(), Variant: "thumb", Peer: true}, codes.Unauthenticated, ""},
		{"peer node", peer, &willowv1.GetRequest{MediaId: id.String(), Variant: "thumb", Peer: true}, codes.OK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := get(t, c.creds, c.req)
			if status.Code(err) != c.code || (c.reason != "" && rpcstatus.Reason(err) != c.reason) {
				t.Fatalf("Get: %v (reason %q), want %v %q", err, rpcstatus.Reason(err), c.code, c.reason)
			}
		})
	}
}
