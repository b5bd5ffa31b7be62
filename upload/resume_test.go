package upload_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/internal/testenv"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/store"
	"willow/store/s3"
	"willow/upload"
)

// twoFronts starts upload-a-1 and upload-a-2 of region a on one real S3
// store (versitygw) and one real Redis, each with its own staging dir.
func twoFronts(t *testing.T, cfg upload.Config) (*front, *front, store.Store) {
	t.Helper()
	gw := testenv.StartS3(t)
	st, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: "willow", AccessKey: gw.AccessKey, SecretKey: gw.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	var rc redis.UniversalClient = testenv.StartRedis(t).Client(t)
	a1 := newFront(t, frontOpts{store: st, redis: rc, cfg: cfg, id: "upload-a-1"})
	a2 := newFront(t, frontOpts{store: st, redis: rc, cfg: cfg, id: "upload-a-2"})
	return a1, a2, st
}

// TestResumeOnAnotherFront: an upload begun on upload-a-1 continues on
// upload-a-2 from the durable offset, sending only the missing bytes; the
// first front has lost it (upload_moved), the media is one, its raw is
// intact, and the store's staging copy is removed after the commit.
func TestResumeOnAnotherFront(t *testing.T) {
	ctx := ctxT(t)
	a1, a2, st := twoFronts(t, upload.Config{SyncEvery: 64 << 10})
	data := photo(t)
	const id, user = "resume-1", "u-resume"
	key := media.KeyFor(user, id)
	if _, err := a1.begin(ctx, id, user, data); err != nil {
		t.Fatal(err)
	}
	half := int64(len(data) / 2)
	if off, err := a1.send(ctx, id, data[:half], 0, 32<<10); err != nil || off != half {
		t.Fatalf("first half on upload-a-1: offset %d, %v", off, err)
	}

	// upload-a-2 has never seen it: Status and Begin answer the durable
	// offset from the region's copy.
	stt, err := a2.client.Status(ctx, &willowv1.StatusRequest{UploadId: id, User: user})
	if err != nil || stt.GetOffset() != half || stt.GetCommitted() {
		t.Fatalf("Status on upload-a-2: %v, %v; want offset %d", stt, err, half)
	}
	b, err := a2.begin(ctx, id, user, data)
	if err != nil || b.GetOffset() != half {
		t.Fatalf("Begin on upload-a-2: %v, %v; want offset %d", b, err, half)
	}
	// The old front no longer takes bytes of it.
	if _, err := a1.send(ctx, id, data, half, 64<<10); rpcstatus.Reason(err) != upload.ReasonUploadMoved || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("chunks to upload-a-1 after the takeover: %v, want FAILED_PRECONDITION %s", err, upload.ReasonUploadMoved)
	}
	if _, err := a1.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: user}); rpcstatus.Reason(err) != upload.ReasonUploadMoved {
		t.Fatalf("Commit on upload-a-1 after the takeover: %v, want %s", err, upload.ReasonUploadMoved)
	}
	if off, err := a2.send(ctx, id, data, b.GetOffset(), 32<<10); err != nil || off != int64(len(data)) {
		t.Fatalf("rest on upload-a-2: %d, %v", off, err)
	}
	cr, err := a2.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: user})
	if err != nil {
		t.Fatal(err)
	}
	if mid, _ := media.Parse(cr.GetMediaId()); mid.Key != key || cr.GetDuplicate() {
		t.Fatalf("commit on upload-a-2: %v", cr)
	}
	if got := storeBytes(t, st, media.RawKey(key)); !bytes.Equal(got, data) {
		t.Fatalf("raw in the store is %d bytes, not the upload's %d", len(got), len(data))
	}
	// The same upload ID, anywhere in the region: the same media.
	for _, f := range []*front{a1, a2} {
		again, err := f.upload(ctx, id, user, data)
		if err != nil || again.GetMediaId() != cr.GetMediaId() || !again.GetDuplicate() {
			t.Fatalf("upload again on %s: %v, %v; want duplicate %s", f.node.Config().ID, again, err, cr.GetMediaId())
		}
	}
	eventually(t, "the staging copy removed", func() bool {
		_, err := st.Stat(ctx, "staging/"+key+"/session.json")
		return errors.Is(err, store.ErrNotFound)
	})
}

// TestResumeTakesBack: upload-a-1 resumes an upload upload-a-2 took from
// it (the client came back): Begin adopts the newest copy, not its own
// stale bytes.
func TestResumeTakesBack(t *testing.T) {
	ctx := ctxT(t)
	a1, a2, _ := twoFronts(t, upload.Config{SyncEvery: 64 << 10})
	data := photo(t)
	const id, user = "resume-back", "u-back"
	q := int64(len(data) / 4)
	if _, err := a1.begin(ctx, id, user, data); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.send(ctx, id, data[:q], 0, 32<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.begin(ctx, id, user, data); err != nil {
		t.Fatal(err)
	}
	if off, err := a2.send(ctx, id, data[:3*q], q, 32<<10); err != nil || off != 3*q {
		t.Fatalf("a2: %d %v", off, err)
	}
	b, err := a1.begin(ctx, id, user, data)
	if err != nil || b.GetOffset() != 3*q {
		t.Fatalf("Begin back on upload-a-1: %v, %v; want %d", b, err, 3*q)
	}
	r, err := a1.upload(ctx, id, user, data)
	if err != nil || r.GetDuplicate() {
		t.Fatalf("finish on upload-a-1: %v %v", r, err)
	}
	if _, err := a2.client.Commit(ctx, &willowv1.CommitRequest{UploadId: id, User: user}); err != nil {
		// upload-a-2 finds the store record: the same media.
		t.Fatalf("commit on upload-a-2: %v", err)
	}
}

// TestResumeDamagedPart: a part whose bytes do not match the record ends
// the copy there; the new front resumes before it.
func TestResumeDamagedPart(t *testing.T) {
	ctx := ctxT(t)
	// Several parts from one stream: a copy at every SyncEvery point.
	a1, a2, st := twoFronts(t, upload.Config{SyncEvery: 64 << 10, MirrorInterval: -1})
	data := photo(t)
	const id, user = "resume-damaged", "u-dmg"
	key := media.KeyFor(user, id)
	if _, err := a1.begin(ctx, id, user, data); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.send(ctx, id, data[:len(data)/2], 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Parts []struct{ Off, Len int64 }
	}
	if err := json.Unmarshal(storeBytes(t, st, "staging/"+key+"/session.json"), &rec); err != nil || len(rec.Parts) < 2 {
		t.Fatalf("session record: %+v %v", rec, err)
	}
	p := rec.Parts[1]
	bad := bytes.Repeat([]byte{0xAA}, int(p.Len))
	if err := st.Put(ctx, "staging/"+key+"/part-"+pad16(p.Off), bytes.NewReader(bad), p.Len, ""); err != nil {
		t.Fatal(err)
	}
	b, err := a2.begin(ctx, id, user, data)
	if err != nil || b.GetOffset() != p.Off {
		t.Fatalf("Begin on upload-a-2 with part 1 damaged: %v %v; want offset %d", b, err, p.Off)
	}
	r, err := a2.upload(ctx, id, user, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := storeBytes(t, st, media.RawKey(key)); !bytes.Equal(got, data) || r.GetDuplicate() {
		t.Fatalf("raw %d bytes after a damaged part", len(got))
	}
}

// TestResumeMirrorOff: with the mirror off, another front starts over.
func TestResumeMirrorOff(t *testing.T) {
	ctx := ctxT(t)
	a1, a2, _ := twoFronts(t, upload.Config{SyncEvery: 64 << 10, DisableStagingMirror: true})
	data := photo(t)
	if _, err := a1.begin(ctx, "off-1", "u", data); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.send(ctx, "off-1", data[:len(data)/2], 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	if b, err := a2.begin(ctx, "off-1", "u", data); err != nil || b.GetOffset() != 0 {
		t.Fatalf("Begin on upload-a-2 without the mirror: %v %v", b, err)
	}
}

// TestTusResumeOnAnotherFront: a tus upload created on upload-a-1's HTTP
// port continues at the same path on upload-a-2's.
func TestTusResumeOnAnotherFront(t *testing.T) {
	a1, a2, st := twoFronts(t, upload.Config{SyncEvery: 64 << 10})
	h1, h2 := httpFront(t, a1, upload.HTTPConfig{}), httpFront(t, a2, upload.HTTPConfig{})
	data := photo(t)
	auth := "Bearer " + tok(t, "u-tus", "moments")
	half := len(data) / 2
	resp := do(t, "POST", h1.URL(), map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Upload-Length": strconv.Itoa(len(data)),
		"Content-Type":    "application/offset+octet-stream",
		"Upload-Metadata": md("filename", "p.jpg", "filetype", "image/jpeg", "business", "moments", "upload_id", "tus-any")}, data[:half])
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 201 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) {
		t.Fatalf("create on upload-a-1: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	loc2 := h2.URL() + strings.TrimPrefix(loc, h1.URL())
	resp = do(t, "HEAD", loc2, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Upload-Offset") != strconv.Itoa(half) {
		t.Fatalf("HEAD on upload-a-2: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(t, "PATCH", loc2, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth,
		"Content-Type": "application/offset+octet-stream", "Upload-Offset": strconv.Itoa(half)}, data[half:])
	id := resp.Header.Get(upload.HeaderMediaID)
	if resp.StatusCode != 204 || id == "" {
		t.Fatalf("PATCH on upload-a-2: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	mid, _ := media.Parse(id)
	if got := storeBytes(t, st, media.RawKey(mid.Key)); !bytes.Equal(got, data) {
		t.Fatalf("raw %d bytes", len(got))
	}
}

func pad16(n int64) string {
	s := strconv.FormatInt(n, 10)
	return strings.Repeat("0", 16-len(s)) + s
}

// TestResumePartOwnSHA256: a session record written before parts carried
// prefix_sha256 lists each part's own SHA-256; an adopter checks that
// instead, and a wrong one still ends the copy there.
func TestResumePartOwnSHA256(t *testing.T) {
	ctx := ctxT(t)
	a1, a2, st := twoFronts(t, upload.Config{SyncEvery: 64 << 10, MirrorInterval: -1})
	data := photo(t)
	const id, user = "resume-own-sha", "u-own"
	key := media.KeyFor(user, id)
	if _, err := a1.begin(ctx, id, user, data); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.send(ctx, id, data[:len(data)/2], 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	recKey := "staging/" + key + "/session.json"
	var rec map[string]any
	if err := json.Unmarshal(storeBytes(t, st, recKey), &rec); err != nil {
		t.Fatal(err)
	}
	parts, _ := rec["parts"].([]any)
	if len(parts) < 2 {
		t.Fatalf("session record has %d parts, want 2 or more", len(parts))
	}
	var ends []int64
	for i, p := range parts {
		m := p.(map[string]any)
		if m["prefix_sha256"] == nil || m["sha256"] != nil {
			t.Fatalf("part %d as written: %v; want prefix_sha256 only", i, m)
		}
		off, n := int64(m["off"].(float64)), int64(m["len"].(float64))
		delete(m, "prefix_sha256")
		m["sha256"] = sum(data[off : off+n])
		ends = append(ends, off+n)
	}
	parts[1].(map[string]any)["sha256"] = sum(data[:1]) // wrong for part 1
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, recKey, bytes.NewReader(b), int64(len(b)), "application/json"); err != nil {
		t.Fatal(err)
	}
	if got, err := a2.begin(ctx, id, user, data); err != nil || got.GetOffset() != ends[0] {
		t.Fatalf("Begin on upload-a-2 from own-SHA-256 parts: %v %v; want offset %d", got, err, ends[0])
	}
	r, err := a2.upload(ctx, id, user, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := storeBytes(t, st, media.RawKey(key)); !bytes.Equal(got, data) || r.GetDuplicate() {
		t.Fatalf("raw %d bytes after adopting own-SHA-256 parts", len(got))
	}
}
