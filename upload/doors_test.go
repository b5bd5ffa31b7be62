package upload_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/upload"
)

// The tests in this file attack the upload front's content and limit
// doors through the raw proto (no SDK), each also checking the legitimate
// path through the same door.

func beginReq(t *testing.T, id, user string, kind willowv1.Kind, data []byte, ctype string) *willowv1.BeginRequest {
	return &willowv1.BeginRequest{UploadId: id, Token: tok(t, user, "moments"), Business: "moments", User: user,
		Kind: kind, Size: int64(len(data)), Sha256: sum(data), ContentType: ctype}
}

// sendAll sends data on one Chunks stream in chunks of n bytes.
func sendAll(ctx context.Context, c willowv1.UploadClient, id, user string, data []byte, n int) error {
	s, err := c.Chunks(ctx)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); off += n {
		if err := s.Send(&willowv1.Chunk{UploadId: id, User: user, Offset: int64(off), Data: data[off:min(off+n, len(data))]}); err != nil {
			break
		}
	}
	_, err = s.CloseAndRecv()
	return err
}

func TestContentDoors(t *testing.T) {
	f := newFront(t, frontOpts{instant: true})
	ctx := ctxT(t)
	html := []byte("<!DOCTYPE html><html><body><script>fetch('/steal?c='+document.cookie)</script></body></html>" + strings.Repeat(" ", 600))
	mp4 := append([]byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"), make([]byte, 600)...)

	t.Run("html as a photo refused at the first chunk", func(t *testing.T) {
		if _, err := f.client.Begin(ctx, beginReq(t, "html-1", "mallory", willowv1.Kind_KIND_IMAGE, html, "image/jpeg")); err != nil {
			t.Fatal(err)
		}
		err := sendAll(ctx, f.client, "html-1", "mallory", html, len(html))
		wantReason(t, err, codes.InvalidArgument, upload.ReasonUnsupportedFormat)
		_, err = f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "html-1", User: "mallory"})
		if err == nil {
			t.Fatal("html committed")
		}
	})
	t.Run("html in tiny chunks refused at commit, before the acknowledgement", func(t *testing.T) {
		if _, err := f.client.Begin(ctx, beginReq(t, "html-2", "mallory", willowv1.Kind_KIND_IMAGE, html, "text/html")); err != nil {
			t.Fatal(err)
		}
		if err := sendAll(ctx, f.client, "html-2", "mallory", html, 16); err != nil {
			t.Fatal(err) // no chunk alone shows the format
		}
		_, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "html-2", User: "mallory"})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonUnsupportedFormat)
		if _, ok := storeRecord(t, f, "mallory", "html-2"); ok {
			t.Fatal("a record was stored for the refused upload")
		}
	})
	t.Run("video bytes declared as an image", func(t *testing.T) {
		if _, err := f.client.Begin(ctx, beginReq(t, "mp4-as-image", "mallory", willowv1.Kind_KIND_IMAGE, mp4, "image/jpeg")); err != nil {
			t.Fatal(err)
		}
		err := sendAll(ctx, f.client, "mp4-as-image", "mallory", mp4, len(mp4))
		wantReason(t, err, codes.InvalidArgument, upload.ReasonUnsupportedFormat)
	})
	t.Run("a real photo declared text/html is stored as what it is", func(t *testing.T) {
		data := photo(t)
		if _, err := f.client.Begin(ctx, beginReq(t, "photo-1", "alice", willowv1.Kind_KIND_IMAGE, data, "text/html")); err != nil {
			t.Fatal(err)
		}
		if err := sendAll(ctx, f.client, "photo-1", "alice", data, 256<<10); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "photo-1", User: "alice"}); err != nil {
			t.Fatal(err)
		}
		rec, ok := storeRecord(t, f, "alice", "photo-1")
		if !ok || rec.ContentType != "image/jpeg" {
			t.Fatalf("stored content type %q (record %v), want image/jpeg", rec.ContentType, ok)
		}
	})
}

// storeRecord reads the media record of user's upload from the store.
func storeRecord(t *testing.T, f *front, user, uploadID string) (upload.Record, bool) {
	t.Helper()
	rc, _, err := f.store.Get(context.Background(), media.RecordKey(media.KeyFor(user, uploadID)))
	if err != nil {
		return upload.Record{}, false
	}
	defer rc.Close()
	var rec upload.Record
	if err := json.NewDecoder(rc).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec, true
}

func TestChunksIdleTimeout(t *testing.T) {
	f := newFront(t, frontOpts{cfg: upload.Config{ChunkIdleTimeout: 300 * time.Millisecond}})
	ctx := ctxT(t)
	data := photo(t)[:64<<10]
	if _, err := f.client.Begin(ctx, beginReq(t, "slow", "alice", willowv1.Kind_KIND_IMAGE, data, "")); err != nil {
		t.Fatal(err)
	}
	t.Run("a stream that sends nothing is closed", func(t *testing.T) {
		s, err := f.client.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// Neither a chunk nor the end of the stream: wait for the server.
		err = s.RecvMsg(new(willowv1.ChunksResponse))
		wantReason(t, err, codes.DeadlineExceeded, upload.ReasonIdleTimeout)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("closed after %v", d)
		}
	})
	t.Run("a stream that goes idle after a chunk is closed and keeps its bytes", func(t *testing.T) {
		s, err := f.client.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&willowv1.Chunk{UploadId: "slow", User: "alice", Offset: 0, Data: data[:32<<10]}); err != nil {
			t.Fatal(err)
		}
		err = s.RecvMsg(new(willowv1.ChunksResponse))
		wantReason(t, err, codes.DeadlineExceeded, upload.ReasonIdleTimeout)
		st, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "slow", User: "alice"})
		if err != nil || st.GetOffset() != 32<<10 {
			t.Fatalf("status %v %v, want offset %d kept", st, err, 32<<10)
		}
	})
	t.Run("a slow but steady stream is not", func(t *testing.T) {
		s, err := f.client.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for off := 32 << 10; off < len(data); off += 8 << 10 {
			time.Sleep(150 * time.Millisecond) // under the idle timeout each time, over it in total
			if err := s.Send(&willowv1.Chunk{UploadId: "slow", User: "alice", Offset: int64(off), Data: data[off : off+8<<10]}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := s.CloseAndRecv()
		if err != nil || r.GetOffset() != int64(len(data)) {
			t.Fatalf("offset %d %v", r.GetOffset(), err)
		}
	})
}

func TestStreamCaps(t *testing.T) {
	f := newFront(t, frontOpts{cfg: upload.Config{MaxStreamsPerConn: 2, MaxStreamsPerUser: 1}})
	ctx := ctxT(t)
	data := photo(t)[:16<<10]
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, err := f.client.Begin(ctx, beginReq(t, "up", u, willowv1.Kind_KIND_IMAGE, data, "")); err != nil {
			t.Fatal(err)
		}
	}
	open := func(c willowv1.UploadClient, user string) willowv1.Upload_ChunksClient {
		s, err := c.Chunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// io.EOF: the server already ended the stream (a refused one);
		// CloseAndRecv then returns its status.
		if err := s.Send(&willowv1.Chunk{UploadId: "up", User: user, Offset: 0, Data: data[:1024]}); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // let the server take the stream before the next one
		return s
	}
	a := open(f.client, "alice")
	// alice's second stream, even on another connection: over the user cap.
	conn2, err := node.Dial(f.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	other := willowv1.NewUploadClient(conn2)
	_, err = open(other, "alice").CloseAndRecv()
	wantReason(t, err, codes.ResourceExhausted, upload.ReasonTooManyStreams)
	b := open(f.client, "bob")
	// A third stream on the first connection: over the connection cap.
	_, err = open(f.client, "carol").CloseAndRecv()
	wantReason(t, err, codes.ResourceExhausted, upload.ReasonTooManyStreams)
	// carol on another connection is fine; and closing frees the slots.
	if _, err := open(other, "carol").CloseAndRecv(); err != nil {
		t.Fatalf("carol on another connection: %v", err)
	}
	for _, s := range []willowv1.Upload_ChunksClient{a, b} {
		if _, err := s.CloseAndRecv(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := open(f.client, "alice").CloseAndRecv(); err != nil {
		t.Fatalf("after the others closed: %v", err)
	}
}

func TestStagedUploadCaps(t *testing.T) {
	f := newFront(t, frontOpts{instant: true, cfg: upload.Config{MaxStagedPerUser: 2, MaxStagedPerConn: 3}})
	ctx := ctxT(t)
	data := photo(t)
	begin := func(c willowv1.UploadClient, id, user string) error {
		_, err := c.Begin(ctx, beginReq(t, id, user, willowv1.Kind_KIND_IMAGE, data, ""))
		return err
	}
	for _, id := range []string{"a1", "a2"} {
		if err := begin(f.client, id, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	wantReason(t, begin(f.client, "a3", "alice"), codes.ResourceExhausted, upload.ReasonTooManyUploads)
	if err := begin(f.client, "a1", "alice"); err != nil { // resuming is not a new upload
		t.Fatalf("resume: %v", err)
	}
	if err := begin(f.client, "b1", "bob"); err != nil {
		t.Fatal(err)
	}
	// The connection holds 3 now.
	wantReason(t, begin(f.client, "c1", "carol"), codes.ResourceExhausted, upload.ReasonTooManyUploads)
	conn2, err := node.Dial(f.node.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if err := begin(willowv1.NewUploadClient(conn2), "c1", "carol"); err != nil {
		t.Fatalf("carol on another connection: %v", err)
	}
	// Committing gives the slot back.
	if err := sendAll(ctx, f.client, "a1", "alice", data, 256<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "a1", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := begin(willowv1.NewUploadClient(conn2), "a3", "alice"); err != nil {
		t.Fatalf("after a commit: %v", err)
	}
}

func TestLongStrings(t *testing.T) {
	f := newFront(t, frontOpts{})
	ctx := ctxT(t)
	data := photo(t)[:4096]
	long := strings.Repeat("x", 10_000)
	for _, c := range []struct {
		name   string
		mod    func(r *willowv1.BeginRequest)
		reason string
	}{
		{"filename", func(r *willowv1.BeginRequest) { r.Filename = long }, upload.ReasonFieldTooLong},
		{"content type", func(r *willowv1.BeginRequest) { r.ContentType = long }, upload.ReasonFieldTooLong},
		{"upload id", func(r *willowv1.BeginRequest) { r.UploadId = long }, upload.ReasonBadUploadID},
		{"user", func(r *willowv1.BeginRequest) { r.User = long; r.Token = tok(t, long, "moments") }, upload.ReasonBadUser},
		{"token", func(r *willowv1.BeginRequest) { r.Token = long }, upload.ReasonTokenInvalid},
	} {
		t.Run("begin "+c.name, func(t *testing.T) {
			r := beginReq(t, "long", "alice", willowv1.Kind_KIND_IMAGE, data, "image/jpeg")
			c.mod(r)
			_, err := f.client.Begin(ctx, r)
			if c.reason == upload.ReasonTokenInvalid {
				wantReason(t, err, codes.Unauthenticated, c.reason)
				return
			}
			wantReason(t, err, codes.InvalidArgument, c.reason)
		})
	}
	t.Run("chunk", func(t *testing.T) {
		wantReason(t, sendAll(ctx, f.client, long, "alice", data, len(data)), codes.InvalidArgument, upload.ReasonFieldTooLong)
		wantReason(t, sendAll(ctx, f.client, "long", long, data, len(data)), codes.InvalidArgument, upload.ReasonFieldTooLong)
	})
	t.Run("status and commit", func(t *testing.T) {
		_, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: long, User: "alice"})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonFieldTooLong)
		_, err = f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "long", User: long})
		wantReason(t, err, codes.InvalidArgument, upload.ReasonFieldTooLong)
	})
	t.Run("at the limits", func(t *testing.T) {
		r := beginReq(t, strings.Repeat("i", upload.MaxUploadIDLen), "alice", willowv1.Kind_KIND_IMAGE, data, strings.Repeat("c", upload.MaxContentTypeLen))
		r.Filename = strings.Repeat("f", upload.MaxFilenameLen)
		if _, err := f.client.Begin(ctx, r); err != nil {
			t.Fatal(err)
		}
	})
}
