package edgecache_test

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"net/http"
	"strings"
	"testing"

	"willow/compress"
	"willow/edgecache"
	"willow/flex"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
)

// Chromium's Accept for <img> (and for a page: neither names HEIC).
const (
	chromiumImgAccept  = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
	chromiumPageAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
)

// testHEIC encodes a small gradient as HEIC, as compress does at the
// normal level.
func testHEIC(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	out, err := compress.Encode(img, media.VariantThumb, compress.ImageOptions{Codec: flex.CodecHEIC})
	if err != nil {
		t.Fatalf("encode heic: %v", err)
	}
	return out.Data
}

func TestNegotiation(t *testing.T) {
	st := newStore(t)
	heic := testHEIC(t, 320, 240)
	id := put(t, st, media.LocStore, 1, media.VariantMedium, "image/heic", heic)
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	u := e.url + path(id, media.VariantMedium)

	var heicTag, jpegTag string
	var jpegBody []byte
	for _, tc := range []struct {
		name   string
		query  string
		accept string
		want   string // content type
	}{
		{"chromium img", "", chromiumImgAccept, "image/jpeg"},
		{"chromium page", "", chromiumPageAccept, "image/jpeg"},
		{"wildcard only", "", "*/*", "image/jpeg"},
		{"mobile app", "", "image/heic,image/jpeg;q=0.8", "image/heic"},
		{"heif", "", "image/heif", "image/heic"},
		{"heic refused by q=0", "", "image/heic;q=0, image/*", "image/jpeg"},
		{"no Accept: anything goes", "", "", "image/heic"},
		{"forced jpeg", "?format=jpeg", "image/heic", "image/jpeg"},
		{"forced heic", "?format=heic", chromiumImgAccept, "image/heic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.accept != "" {
				hdr["Accept"] = tc.accept
			}
			resp, body := get(t, u+tc.query, hdr)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.want {
				t.Fatalf("status %d, Content-Type %q, want %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.want)
			}
			if resp.Header.Get("Vary") != "Accept" || resp.Header.Get("Last-Modified") == "" {
				t.Fatalf("Vary %q, Last-Modified %q", resp.Header.Get("Vary"), resp.Header.Get("Last-Modified"))
			}
			switch tc.want {
			case "image/heic":
				if !bytes.Equal(body, heic) {
					t.Fatal("HEIC representation is not the stored bytes")
				}
				heicTag = resp.Header.Get("ETag")
			default:
				img, err := jpeg.Decode(bytes.NewReader(body))
				if err != nil || img.Bounds().Dx() != 320 || img.Bounds().Dy() != 240 {
					t.Fatalf("JPEG fallback does not decode to 320x240: %v", err)
				}
				if jpegBody != nil && !bytes.Equal(body, jpegBody) {
					t.Fatal("the JPEG fallback changed between requests")
				}
				jpegBody, jpegTag = body, resp.Header.Get("ETag")
			}
		})
	}
	if heicTag == "" || jpegTag == "" || heicTag == jpegTag {
		t.Fatalf("ETags HEIC %s, JPEG %s: want two different ones", heicTag, jpegTag)
	}
	if got := counterValue(t, e.node, "willow_edgecache_jpeg_fallbacks_total", "ok"); got != 1 {
		t.Fatalf("%v JPEG fallbacks made, want 1 (cached)", got)
	}
	if n := st.gets.Load(); n != 1 {
		t.Fatalf("%d origin reads, want 1", n)
	}

	// Range and 304 per representation.
	jpg := map[string]string{"Accept": chromiumImgAccept}
	resp, body := get(t, u, map[string]string{"Accept": chromiumImgAccept, "Range": "bytes=10-19"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, jpegBody[10:20]) || resp.Header.Get("Vary") != "Accept" {
		t.Fatalf("JPEG range: status %d", resp.StatusCode)
	}
	resp, body = get(t, u, map[string]string{"Accept": "image/heic", "Range": "bytes=10-19"})
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, heic[10:20]) {
		t.Fatalf("HEIC range: status %d", resp.StatusCode)
	}
	jpg["If-None-Match"] = jpegTag
	if resp, _ = get(t, u, jpg); resp.StatusCode != http.StatusNotModified || resp.Header.Get("Vary") != "Accept" {
		t.Fatalf("JPEG If-None-Match: status %d", resp.StatusCode)
	}
	jpg["If-None-Match"] = heicTag // the other representation's tag does not match
	if resp, _ = get(t, u, jpg); resp.StatusCode != 200 {
		t.Fatalf("JPEG with the HEIC ETag: status %d", resp.StatusCode)
	}
	if resp, _ = get(t, u, map[string]string{"Accept": "image/heic", "If-None-Match": heicTag}); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("HEIC If-None-Match: status %d", resp.StatusCode)
	}
	resp, _ = get(t, u, map[string]string{"Accept": chromiumImgAccept})
	lm := resp.Header.Get("Last-Modified")
	if resp, _ = get(t, u, map[string]string{"Accept": chromiumImgAccept, "If-Modified-Since": lm}); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-Modified-Since: status %d", resp.StatusCode)
	}
	if resp, body = get(t, u+"?format=webm", nil); resp.StatusCode != 400 || !strings.Contains(string(body), edgecache.ReasonBadFormat) {
		t.Fatalf("bad format: status %d %s", resp.StatusCode, body)
	}

	// gRPC: the stored representation unless format says jpeg.
	conn, err := node.Dial(e.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := willowv1.NewEdgeCacheClient(conn)
	if got, first := grpcRead(t, c, &willowv1.GetRequest{MediaId: id.String(), Variant: "medium"}); !bytes.Equal(got, heic) || first.GetContentType() != "image/heic" {
		t.Fatalf("gRPC default: %s", first.GetContentType())
	}
	if got, first := grpcRead(t, c, &willowv1.GetRequest{MediaId: id.String(), Variant: "medium", Format: "jpeg"}); !bytes.Equal(got, jpegBody) || first.GetEtag() != jpegTag {
		t.Fatalf("gRPC jpeg: %s %s", first.GetContentType(), first.GetEtag())
	}
}

// TestNegotiationJPEGStored: a variant compress stored as JPEG (the flex
// path) is the same bytes for every client, and no fallback is made.
func TestNegotiationJPEGStored(t *testing.T) {
	st := newStore(t)
	var buf bytes.Buffer
	jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, 64, 48)), nil)
	id := put(t, st, media.LocStore, 1, media.VariantLarge, "image/jpeg", buf.Bytes())
	e := startEdge(t, "edge-a-1", edgecache.Config{}, edgecache.Deps{Store: st})
	for _, accept := range []string{chromiumImgAccept, "image/heic", ""} {
		resp, body := get(t, e.url+path(id, media.VariantLarge), map[string]string{"Accept": accept})
		if resp.StatusCode != 200 || !bytes.Equal(body, buf.Bytes()) || resp.Header.Get("Vary") != "Accept" {
			t.Fatalf("Accept %q: status %d", accept, resp.StatusCode)
		}
	}
	if got := counterValue(t, e.node, "willow_edgecache_jpeg_fallbacks_total", "ok"); got != 0 {
		t.Fatalf("%v fallbacks made for a JPEG", got)
	}
}

// TestNegotiationOncePerOC: the JPEG fallback is made by the owner only.
func TestNegotiationOncePerOC(t *testing.T) {
	st := newStore(t)
	heic := testHEIC(t, 160, 120)
	id := put(t, st, media.LocStore, 1, media.VariantThumb, "image/heic", heic)
	cfg := edgecache.Config{Hash: zeroHash}
	owner := startEdge(t, "edge-a-1", cfg, edgecache.Deps{Store: st})
	other := startEdge(t, "edge-a-2", cfg, edgecache.Deps{Store: st})
	owner.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-2", Addr: other.node.Addr()}})
	other.srv.SetPeers([]edgecache.Peer{{ID: "edge-a-1", Addr: owner.node.Addr()}})
	var tags []string
	for _, e := range []*edge{other, owner, other} {
		resp, _ := get(t, e.url+path(id, media.VariantThumb), map[string]string{"Accept": chromiumImgAccept})
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/jpeg" {
			t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		tags = append(tags, resp.Header.Get("ETag"))
	}
	if tags[0] != tags[1] || tags[1] != tags[2] {
		t.Fatalf("ETags differ across the OC: %v", tags)
	}
	if a, b := counterValue(t, owner.node, "willow_edgecache_jpeg_fallbacks_total", "ok"), counterValue(t, other.node, "willow_edgecache_jpeg_fallbacks_total", "ok"); a != 1 || b != 0 {
		t.Fatalf("fallbacks made: owner %v, other %v; want 1 and 0", a, b)
	}
}
