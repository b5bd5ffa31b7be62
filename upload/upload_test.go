package upload_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/flex"
	"willow/internal/testenv"
	"willow/limits"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/store"
	"willow/store/s3"
	"willow/token"
	"willow/upload"
)

func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"fs": func(t *testing.T) store.Store { return nil },
		"s3": func(t *testing.T) store.Store {
			gw := testenv.StartS3(t)
			st, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: "willow", AccessKey: gw.AccessKey, SecretKey: gw.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

func wantReason(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || rpcstatus.Reason(err) != reason {
		t.Fatalf("err = %v (reason %q), want %s %s", err, rpcstatus.Reason(err), code, reason)
	}
}

func TestUploadCommitAndDuplicate(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newFront(t, frontOpts{store: mk(t)})
			ctx := ctxT(t)
			data := photo(t)
			r := f.mustUpload(ctx, "up-1", "alice", data)
			id, err := media.Parse(r.GetMediaId())
			if err != nil || id.Loc != media.LocStore || id.Region != "a" || id.Node != "upload-a-1" || id.Key != media.KeyFor("alice", "up-1") {
				t.Fatalf("media id %q (%v)", r.GetMediaId(), err)
			}
			if r.GetLocation() != "store" || r.GetDuplicate() || len(r.GetVariants()) != 3 {
				t.Fatalf("commit = %v", r)
			}
			if got := storeBytes(t, f.store, media.RawKey(id.Key)); !bytes.Equal(got, data) {
				t.Fatalf("raw in store: %d bytes, want %d", len(got), len(data))
			}
			m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			if err != nil || m.GetState() != "ready" || m.GetSha256() != sum(data) || len(m.GetVariants()) != 3 {
				t.Fatalf("GetMedia = %v, %v", m, err)
			}
			calls := f.compress.calls.Load()

			// The same upload ID again: same media, nothing new.
			b, err := f.begin(ctx, "up-1", "alice", data)
			if err != nil || !b.GetCommitted() || b.GetMediaId() != r.GetMediaId() {
				t.Fatalf("Begin again = %v, %v", b, err)
			}
			r2, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "up-1", User: "alice"})
			if err != nil || !r2.GetDuplicate() || r2.GetMediaId() != r.GetMediaId() {
				t.Fatalf("Commit again = %v, %v", r2, err)
			}
			if f.compress.calls.Load() != calls {
				t.Fatalf("a duplicate commit asked compress again")
			}
			// Another user with the same upload ID gets another media.
			r3 := f.mustUpload(ctx, "up-1", "bob", data)
			if r3.GetMediaId() == r.GetMediaId() {
				t.Fatal("two users' uploads share a media ID")
			}
		})
	}
}

func TestResumeAfterCutStream(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) { testResume(t, mk(t)) })
	}
}

func testResume(t *testing.T, backend store.Store) {
	f := newFront(t, frontOpts{cfg: uploadCfgSmallSync(), store: backend})
	ctx := ctxT(t)
	data := bytes.Repeat(photo(t), 4) // a bit over 1 MiB
	data = data[:3<<20/2]
	if _, err := f.begin(ctx, "cut", "carol", data); err != nil {
		t.Fatal(err)
	}
	// Send half, then cut the stream without closing it.
	sctx, cancel := context.WithCancel(ctx)
	s, err := f.client.Chunks(sctx)
	if err != nil {
		t.Fatal(err)
	}
	half := int64(len(data) / 2)
	for off := int64(0); off < half; off += 64 << 10 {
		if err := s.Send(&willowv1.Chunk{UploadId: "cut", Offset: off, Data: data[off:min(off+64<<10, half)]}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	// The durable offset grows until the front has synced what the cut
	// stream brought (its syncs run in the background); then Status and
	// Begin agree on it.
	var st *willowv1.StatusResponse
	var b *willowv1.BeginResponse
	eventually(t, "durable offset after the cut", func() bool {
		st, err = f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "cut", User: "carol"})
		if err != nil || st.GetOffset() == 0 {
			return false
		}
		b, err = f.begin(ctx, "cut", "carol", data)
		return err == nil && b.GetOffset() == st.GetOffset()
	})
	if st.GetOffset() > half || st.GetState() != "staging" {
		t.Fatalf("Status = %v", st)
	}
	// Resend from a little before the durable offset: duplicates are fine.
	from := max(0, st.GetOffset()-1000)
	off, err := f.send(ctx, "cut", data, from, 100<<10)
	if err != nil || off != int64(len(data)) {
		t.Fatalf("send rest: off %d, %v", off, err)
	}
	r, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "cut", User: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := media.Parse(r.GetMediaId())
	if !bytes.Equal(storeBytes(t, f.store, media.RawKey(id.Key)), data) {
		t.Fatal("resumed upload stored wrong bytes")
	}
}

func TestBadInput(t *testing.T) {
	f := newFront(t, frontOpts{})
	ctx := ctxT(t)
	data := photo(t)
	bomb, err := os.ReadFile("../../shared/testdata/bad/bomb.png")
	if err != nil {
		t.Fatal(err)
	}
	beginReq := func(mut func(*willowv1.BeginRequest)) *willowv1.BeginRequest {
		r := &willowv1.BeginRequest{UploadId: "bad", Token: tok(t, "dave", "moments"), Business: "moments", User: "dave",
			Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(data)), Sha256: sum(data)}
		mut(r)
		return r
	}
	expired, _ := token.Sign(secret, "dave", "moments", time.Now().Add(-time.Minute))
	forged, _ := token.Sign([]byte("not the secret"), "dave", "moments", time.Now().Add(time.Hour))
	begins := []struct {
		name   string
		mut    func(*willowv1.BeginRequest)
		code   codes.Code
		reason string
	}{
		{"forged token", func(r *willowv1.BeginRequest) { r.Token = forged }, codes.Unauthenticated, upload.ReasonTokenInvalid},
		{"garbage token", func(r *willowv1.BeginRequest) { r.Token = "x.y.z" }, codes.Unauthenticated, upload.ReasonTokenInvalid},
		{"expired token", func(r *willowv1.BeginRequest) { r.Token = expired }, codes.Unauthenticated, auth.ReasonTokenExpired},
		{"token of another user", func(r *willowv1.BeginRequest) { r.User = "eve" }, codes.Unauthenticated, upload.ReasonTokenInvalid},
		{"unknown business", func(r *willowv1.BeginRequest) {
			r.Business = "casino"
			r.Token = tok(t, "dave", "casino")
		}, codes.InvalidArgument, flex.ReasonUnknownBusiness},
		{"oversized image", func(r *willowv1.BeginRequest) { r.Size = 31 << 20 }, codes.InvalidArgument, limits.ReasonTooLarge},
		{"oversized video", func(r *willowv1.BeginRequest) { r.Size, r.Kind = 201<<20, willowv1.Kind_KIND_VIDEO }, codes.InvalidArgument, limits.ReasonTooLarge},
		{"bad sha256", func(r *willowv1.BeginRequest) { r.Sha256 = "abc" }, codes.InvalidArgument, upload.ReasonBadSHA256},
		{"no kind", func(r *willowv1.BeginRequest) { r.Kind = 0 }, codes.InvalidArgument, upload.ReasonBadKind},
		{"bad upload id", func(r *willowv1.BeginRequest) { r.UploadId = "a/b" }, codes.InvalidArgument, upload.ReasonBadUploadID},
	}
	for _, tt := range begins {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.client.Begin(ctx, beginReq(tt.mut))
			wantReason(t, err, tt.code, tt.reason)
		})
	}

	t.Run("wrong sha256 stores nothing", func(t *testing.T) {
		other := append([]byte(nil), data...)
		other[100] ^= 0xff
		if _, err := f.client.Begin(ctx, &willowv1.BeginRequest{UploadId: "sha", Token: tok(t, "dave", "moments"), Business: "moments",
			User: "dave", Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(data)), Sha256: sum(data)}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.send(ctx, "sha", other, 0, 64<<10); err != nil {
			t.Fatal(err)
		}
		_, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "sha", User: "dave"})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonSHA256Mismatch)
		if _, err := f.store.Stat(ctx, media.RawKey(media.KeyFor("dave", "sha"))); err == nil {
			t.Fatal("raw stored after a sha256 mismatch")
		}
		// The staging was reset: the right bytes under the same ID work.
		st, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "sha", User: "dave"})
		if err != nil || st.GetOffset() != 0 {
			t.Fatalf("Status after mismatch = %v, %v", st, err)
		}
		if _, err := f.send(ctx, "sha", data, 0, 64<<10); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "sha", User: "dave"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pixel bomb rejected by its header mid-stream", func(t *testing.T) {
		// A bomb header followed by many MiB: the stream fails at the
		// first chunk, long before the end.
		big := append(append([]byte(nil), bomb...), make([]byte, 8<<20)...)
		if _, err := f.begin(ctx, "bomb2", "dave", big); err != nil {
			t.Fatal(err)
		}
		s, err := f.client.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for off := 0; off < len(big); off += 256 << 10 {
			if s.Send(&willowv1.Chunk{UploadId: "bomb2", Offset: int64(off), Data: big[off:min(off+256<<10, len(big))]}) != nil {
				break
			}
			sent++
		}
		_, err = s.CloseAndRecv()
		wantReason(t, err, codes.InvalidArgument, limits.ReasonPixelBomb)
		st, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "bomb2", User: "dave"})
		if err != nil || st.GetOffset() > 1<<20 {
			t.Fatalf("staged %d bytes of a pixel bomb (%v)", st.GetOffset(), err)
		}
	})
	t.Run("incomplete", func(t *testing.T) {
		if _, err := f.begin(ctx, "short", "dave", data); err != nil {
			t.Fatal(err)
		}
		if _, err := f.send(ctx, "short", data[:1000], 0, 500); err != nil {
			t.Fatal(err)
		}
		_, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "short", User: "dave"})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonSizeMismatch)
	})
	t.Run("pixel bomb", func(t *testing.T) {
		_, err := f.upload(ctx, "bomb", "dave", bomb)
		wantReason(t, err, codes.InvalidArgument, limits.ReasonPixelBomb)
		_, err = f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "bomb", User: "dave"})
		wantReason(t, err, codes.InvalidArgument, limits.ReasonPixelBomb)
		if _, err := f.store.Stat(ctx, media.RawKey(media.KeyFor("dave", "bomb"))); err == nil {
			t.Fatal("pixel bomb stored")
		}
	})

	chunkCases := []struct {
		name   string
		chunks []*willowv1.Chunk
		code   codes.Code
		reason string
		want   int64
	}{
		{"in order", []*willowv1.Chunk{{Offset: 0, Data: data[:100]}, {Offset: 100, Data: data[100:200]}}, codes.OK, "", 200},
		{"duplicated", []*willowv1.Chunk{{Offset: 0, Data: data[:100]}, {Offset: 0, Data: data[:100]}, {Offset: 50, Data: data[50:150]}}, codes.OK, "", 150},
		{"gap", []*willowv1.Chunk{{Offset: 0, Data: data[:100]}, {Offset: 300, Data: data[300:400]}}, codes.InvalidArgument, upload.ReasonChunkOutOfOrder, 0},
		{"conflicting duplicate", []*willowv1.Chunk{{Offset: 0, Data: data[:100]}, {Offset: 10, Data: []byte("nope")}}, codes.InvalidArgument, upload.ReasonChunkMismatch, 0},
		{"past the size", []*willowv1.Chunk{{Offset: int64(len(data)) - 1, Data: []byte("xx")}}, codes.InvalidArgument, upload.ReasonChunkOutOfRange, 0},
		{"unknown upload", []*willowv1.Chunk{{UploadId: "never-begun", Offset: 0, Data: data[:10]}}, codes.NotFound, upload.ReasonUnknownUpload, 0},
	}
	for i, tt := range chunkCases {
		t.Run("chunks "+tt.name, func(t *testing.T) {
			id := "chunks-" + string(rune('a'+i))
			if _, err := f.begin(ctx, id, "dave", data); err != nil {
				t.Fatal(err)
			}
			s, err := f.client.Chunks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.chunks {
				if c.UploadId == "" {
					c.UploadId = id
				}
				if s.Send(c) != nil {
					break
				}
			}
			r, err := s.CloseAndRecv()
			if tt.code == codes.OK {
				if err != nil || r.GetOffset() != tt.want {
					t.Fatalf("offset %d, %v; want %d", r.GetOffset(), err, tt.want)
				}
				return
			}
			wantReason(t, err, tt.code, tt.reason)
		})
	}
	t.Run("chunks after commit", func(t *testing.T) {
		f.mustUpload(ctx, "done", "dave", data)
		_, err := f.send(ctx, "done", data, 0, 1000)
		wantReason(t, err, codes.FailedPrecondition, upload.ReasonAlreadyCommitted)
	})
	t.Run("bad media id", func(t *testing.T) {
		_, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: "nope"})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonBadMediaID)
		_, err = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: "s.a.upload-a-1." + strings.Repeat("0", 32)})
		wantReason(t, err, codes.NotFound, rpcstatus.ReasonNotFound)
		// A pool item of this front that it does not hold: gone.
		_, err = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: "p2.a.upload-a-1." + strings.Repeat("0", 32)})
		wantReason(t, err, codes.NotFound, rpcstatus.ReasonNotFound)
	})
	// A pool item of another front, not drained to the store: its bytes
	// are on that front (down, when a reader falls back here), so the
	// answer is UNAVAILABLE held_by_front, not NOT_FOUND.
	t.Run("pool item of another front", func(t *testing.T) {
		for _, id := range []string{"p2.a.upload-a-2." + strings.Repeat("1", 32), "p1.a.upload-a-2." + strings.Repeat("1", 32)} {
			_, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
			wantReason(t, err, codes.Unavailable, upload.ReasonHeldByFront)
			if !strings.Contains(status.Convert(err).Message(), "upload-a-2") {
				t.Errorf("GetMedia %s: %v, want the front named", id, err)
			}
			_, err = f.read(ctx, id, "raw")
			wantReason(t, err, codes.Unavailable, upload.ReasonHeldByFront)
		}
	})
}

func TestCompressRetriedFromRedisJournal(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rd := rt
		rdb := rd.Client(t)
		f := newFront(t, frontOpts{redis: rdb})
		ctx := ctxT(t)
		f.compress.setFail(status.Error(codes.ResourceExhausted, "shed (test)"))
		r := f.mustUpload(ctx, "later", "frank", photo(t))
		if len(r.GetVariants()) != 0 {
			t.Fatalf("variants from a failing compress: %v", r.GetVariants())
		}
		n, err := rdb.ZCard(ctx, "willow:upload:upload-a-1:compress").Result()
		if err != nil || n != 1 {
			t.Fatalf("journal depth in redis = %d, %v", n, err)
		}
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
		if err != nil || m.GetState() != "processing" {
			t.Fatalf("GetMedia = %v, %v", m, err)
		}
		f.compress.setFail(nil)
		eventually(t, "variants after compress recovers", func() bool {
			m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && m.GetState() == "ready" && len(m.GetVariants()) == 3
		})
		eventually(t, "journal empty", func() bool {
			n, _ := rdb.ZCard(ctx, "willow:upload:upload-a-1:compress").Result()
			return n == 0
		})
	})
}

func TestRedisDownJournalFallsBackToFile(t *testing.T) {
	testenv.ForEachRedis(t, func(t *testing.T, rt testenv.RedisTarget) {
		rd := rt
		rdb := rd.Client(t)
		f := newFront(t, frontOpts{redis: rdb})
		ctx := ctxT(t)
		f.compress.setFail(status.Error(codes.Unavailable, "down (test)"))
		rd.Kill()
		r := f.mustUpload(ctx, "noredis", "gina", photo(t))
		f.compress.setFail(nil)
		eventually(t, "variants with redis down", func() bool {
			m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
			return err == nil && m.GetState() == "ready"
		})
	})
}
