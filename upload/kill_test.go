package upload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"willow/buffer"
	"willow/compress"
	"willow/internal/testenv"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store/fs"
	"willow/upload"
)

// TestMain doubles as the upload-front child process of the kill -9 test.
func TestMain(m *testing.M) {
	if os.Getenv("WILLOW_UPLOAD_CHILD") == "1" {
		os.Exit(runChild())
	}
	os.Exit(testenv.Main(m))
}

// runChild serves an upload front on $CHILD_ADDR with its staging in
// $CHILD_STAGING, the fs store in $CHILD_STORE and compress at
// $CHILD_COMPRESS, until killed.
func runChild() int {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", GRPCAddr: os.Getenv("CHILD_ADDR"), Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err := fs.New(os.Getenv("CHILD_STORE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, err := node.Dial(os.Getenv("CHILD_COMPRESS"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	deps := upload.Deps{Node: n, Store: st, Compress: willowv1.NewCompressClient(conn)}
	if dir := os.Getenv("CHILD_POOLS"); dir != "" {
		for i, dst := range []**buffer.Pool{&deps.Pool1, &deps.Pool2} {
			seg, _ := strconv.ParseInt(os.Getenv("CHILD_SEG_BYTES"), 10, 64)
			p, err := buffer.Open(filepath.Join(dir, fmt.Sprint("pool", i+1)), buffer.Options{Name: fmt.Sprint("pool", i+1), MaxSegmentBytes: seg})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			*dst = p
		}
	}
	if os.Getenv("CHILD_POOL2_FORCE") == "1" {
		n.ApplyFlex(&willowv1.FlexState{Version: 1, Level: "yellow", Knobs: map[string]string{"pool2": "force"}})
	}
	if kv := os.Getenv("CHILD_KNOBS"); kv != "" { // k=v,k=v
		knobs := map[string]string{}
		for _, p := range strings.Split(kv, ",") {
			k, v, _ := strings.Cut(p, "=")
			knobs[k] = v
		}
		n.ApplyFlex(&willowv1.FlexState{Version: 1, Level: "normal", Knobs: knobs})
	}
	compactDead, _ := strconv.ParseInt(os.Getenv("CHILD_COMPACT_DEAD"), 10, 64)
	srv, err := upload.New(upload.Config{Secret: secret, StagingDir: os.Getenv("CHILD_STAGING"), CompactDeadBytes: compactDead,
		RetryMin: 100 * time.Millisecond, RetryMax: 300 * time.Millisecond, CompressTimeout: 20 * time.Second, PollInterval: 50 * time.Millisecond},
		deps)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	go srv.Run(ctx)
	if addr := os.Getenv("CHILD_HTTP"); addr != "" {
		h, err := upload.NewHTTP(srv, upload.HTTPConfig{Addr: addr})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { _ = h.Run(ctx) }()
	}
	if err := n.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func startChild(t *testing.T, addr, staging, storeDir, compressAddr string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WILLOW_UPLOAD_CHILD=1", "CHILD_ADDR="+addr, "CHILD_STAGING="+staging,
		"CHILD_STORE="+storeDir, "CHILD_COMPRESS="+compressAddr)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := testenv.WaitTCP(addr, 20*time.Second); err != nil {
		t.Fatalf("child front: %v", err)
	}
	return cmd
}

func TestKill9AfterAckLosesNothing(t *testing.T) {
	dir := t.TempDir()
	staging, storeDir := filepath.Join(dir, "staging"), filepath.Join(dir, "store")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	compressAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // nothing listens yet
	ctx := ctxT(t)

	child := startChild(t, addr, staging, storeDir, compressAddr)
	conn, err := node.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f := &front{t: t, client: willowv1.NewUploadClient(conn)}
	data, err := os.ReadFile("../../shared/testdata/photos/plasma_DarkestHour.jpg")
	if err != nil {
		t.Fatal(err)
	}
	// One upload half sent, one committed.
	if _, err := f.begin(ctx, "half", "kim", data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.send(ctx, "half", data[:len(data)/2], 0, 32<<10); err != nil {
		t.Fatal(err)
	}
	r := f.mustUpload(ctx, "k9", "kim", data)
	// SIGKILL right after the acknowledgement.
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	if len(r.GetVariants()) != 0 {
		t.Fatalf("variants before any compress worker existed: %v", r.GetVariants())
	}

	// A real compress worker comes up; a new front starts on the same
	// staging dir and store.
	cn, err := node.New(node.Config{ID: "compress-a-1", Role: "compress", Region: "a", GRPCAddr: compressAddr})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := compress.New(compress.Config{TempDir: t.TempDir()}, compress.Deps{Node: cn, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cn.Run(cctx)
	go cs.Run(cctx)
	startChild(t, addr, staging, storeDir, compressAddr)

	id, _ := media.Parse(r.GetMediaId())
	if !bytes.Equal(storeBytes(t, st, media.RawKey(id.Key)), data) {
		t.Fatal("acknowledged raw lost")
	}
	eventually(t, "variants after the restart", func() bool {
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
		return err == nil && m.GetState() == "ready" && len(m.GetVariants()) > 0
	})
	m, _ := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: r.GetMediaId()})
	for _, v := range m.GetVariants() {
		if _, err := st.Stat(ctx, media.VariantKey(id.Key, v.GetName())); err != nil {
			t.Fatalf("variant %s missing: %v", v.GetName(), err)
		}
	}
	// Same upload ID after the restart: same media.
	r2 := f.mustUpload(ctx, "k9", "kim", data)
	if !r2.GetDuplicate() || r2.GetMediaId() != r.GetMediaId() {
		t.Fatalf("after restart: %v", r2)
	}
	// The half-sent upload resumes where its durable offset says.
	s, err := f.client.Status(ctx, &willowv1.StatusRequest{UploadId: "half", User: "kim"})
	if err != nil || s.GetOffset() != int64(len(data)/2) {
		t.Fatalf("Status of the half upload = %v, %v", s, err)
	}
	if _, err := f.send(ctx, "half", data, s.GetOffset(), 32<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "half", User: "kim"}); err != nil {
		t.Fatal(err)
	}
}

func TestKill9DuringPool2Drain(t *testing.T) {
	dir := t.TempDir()
	staging, storeDir, pools := filepath.Join(dir, "staging"), filepath.Join(dir, "store"), filepath.Join(dir, "pools")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	compressAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // never up: no variants
	ctx := ctxT(t)
	child := startChild(t, addr, staging, storeDir, compressAddr, "CHILD_POOLS="+pools, "CHILD_POOL2_FORCE=1")
	conn, err := node.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f := &front{t: t, client: willowv1.NewUploadClient(conn)}
	data := photo(t)
	const n = 30
	ids := map[string]string{}
	for i := range n {
		up := fmt.Sprint("d", i)
		body := append([]byte(nil), data...)
		body = append(body, byte(i)) // distinct bytes per upload
		r := f.mustUpload(ctx, up, "lee", body)
		if r.GetLocation() != "pool2" {
			t.Fatalf("pool2=force: location %q", r.GetLocation())
		}
		ids[up] = r.GetMediaId()
	}
	// Start a background drain and SIGKILL the front in the middle of it.
	if _, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()

	startChild(t, addr, staging, storeDir, compressAddr, "CHILD_POOLS="+pools)
	// Every acknowledged media is readable (from pool 2 or the store) ...
	for up, id := range ids {
		got, err := f.read(ctx, id, "raw")
		if err != nil || len(got) != len(data)+1 {
			t.Fatalf("%s after the kill: %d bytes, %v", up, len(got), err)
		}
	}
	// ... and a second drain finishes the job exactly once.
	dr, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 2, Wait: true})
	if err != nil || dr.GetRemaining() != 0 {
		t.Fatalf("Drain after restart = %v, %v", dr, err)
	}
	t.Logf("drained before the kill: %d, after: %d", n-dr.GetDrained(), dr.GetDrained())
	st, err := fs.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	for up, id := range ids {
		mid, _ := media.Parse(id)
		raw := storeBytes(t, st, media.RawKey(mid.Key))
		if len(raw) != len(data)+1 || raw[len(raw)-1] != byte(mustAtoi(t, up[1:])) {
			t.Fatalf("%s: wrong raw in the store", up)
		}
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		if err != nil || m.GetLocation() != "store" || m.GetMediaId() != id {
			t.Fatalf("%s: GetMedia = %v, %v", up, m, err)
		}
		// Same upload ID again: the same media, nothing new.
		b, err := f.client.Begin(ctx, &willowv1.BeginRequest{UploadId: up, Token: tok(t, "lee", "moments"), Business: "moments",
			User: "lee", Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(raw)), Sha256: sum(raw)})
		if err != nil || !b.GetCommitted() || b.GetMediaId() != id {
			t.Fatalf("%s: Begin again = %v, %v", up, b, err)
		}
	}
	s, err := f.client.BufferStatus(ctx, &willowv1.BufferStatusRequest{})
	if err != nil || s.GetPools()[1].GetItems() != 0 {
		t.Fatalf("BufferStatus = %v, %v", s, err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKill9AfterTusAckLosesNothing: the tus path makes the staging
// metadata durable only with the first sync and commits a body that ends
// the upload without recording its offset (the commit fsyncs the data).
// SIGKILL right after each answer: a committed upload's raw and record
// are there, a half-sent upload resumes from the offset its PATCH
// answered, and one only created (no byte acknowledged) starts over or
// resumes at 0.
func TestKill9AfterTusAckLosesNothing(t *testing.T) {
	dir := t.TempDir()
	staging, storeDir := filepath.Join(dir, "staging"), filepath.Join(dir, "store")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	httpAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	compressAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // never up
	base := "http://" + httpAddr + upload.DefaultHTTPBasePath
	data := photo(t)
	auth := "Bearer " + tok(t, "kim", "moments")
	create := func(id string) string {
		t.Helper()
		resp := do(t, "POST", base, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth, "Upload-Length": strconv.Itoa(len(data)),
			"Upload-Metadata": md("filetype", "image/jpeg", "business", "moments", "upload_id", id, "sha256", sum(data))}, nil)
		if resp.StatusCode != 201 {
			t.Fatalf("create %s: %d %s", id, resp.StatusCode, bodyOf(resp))
		}
		return resp.Header.Get("Location")
	}
	patch := func(loc string, off int, b []byte) *http.Response {
		return do(t, "PATCH", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth,
			"Content-Type": "application/offset+octet-stream", "Upload-Offset": strconv.Itoa(off)}, b)
	}
	head := func(loc string) *http.Response {
		return do(t, "HEAD", loc, map[string]string{"Tus-Resumable": "1.0.0", "Authorization": auth}, nil)
	}
	kill := func(c *exec.Cmd) { _ = c.Process.Signal(syscall.SIGKILL); _ = c.Wait() }
	env := "CHILD_HTTP=" + httpAddr
	child := startChild(t, addr, staging, storeDir, compressAddr, env)
	if err := testenv.WaitTCP(httpAddr, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	// Only created, then killed.
	created := create("tk-created")
	kill(child)
	child = startChild(t, addr, staging, storeDir, compressAddr, env)
	if err := testenv.WaitTCP(httpAddr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp := head(created); resp.StatusCode == 200 && resp.Header.Get("Upload-Offset") != "0" {
		t.Fatalf("HEAD of an upload only created, after the kill: %d offset %q", resp.StatusCode, resp.Header.Get("Upload-Offset"))
	}

	// Half sent: its PATCH answered an offset; killed.
	half := create("tk-half")
	if resp := patch(half, 0, data[:len(data)/2]); resp.StatusCode != 204 || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)/2) {
		t.Fatalf("patch half: %d %v", resp.StatusCode, resp.Header)
	}
	kill(child)
	child = startChild(t, addr, staging, storeDir, compressAddr, env)
	if err := testenv.WaitTCP(httpAddr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	resp := head(half)
	if resp.StatusCode != 200 || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)/2) {
		t.Fatalf("HEAD of the half upload after the kill: %d %v", resp.StatusCode, resp.Header)
	}
	if resp = patch(half, len(data)/2, data[len(data)/2:]); resp.StatusCode != 204 || resp.Header.Get("Willow-Media-Id") == "" {
		t.Fatalf("patch rest: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	halfID := resp.Header.Get("Willow-Media-Id")

	// Whole body in one PATCH, acknowledged by its 204; killed at once.
	whole := create("tk-whole")
	if resp = patch(whole, 0, data); resp.StatusCode != 204 || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		t.Fatalf("patch whole: %d %v %s", resp.StatusCode, resp.Header, bodyOf(resp))
	}
	wholeID := resp.Header.Get("Willow-Media-Id")
	kill(child)

	st, err := fs.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{halfID, wholeID} {
		mid, err := media.Parse(id)
		if err != nil {
			t.Fatalf("media id %q: %v", id, err)
		}
		if !bytes.Equal(storeBytes(t, st, media.RawKey(mid.Key)), data) {
			t.Fatalf("%s: acknowledged raw lost or wrong", id)
		}
		if _, err := st.Stat(context.Background(), media.RecordKey(mid.Key)); err != nil {
			t.Fatalf("%s: record: %v", id, err)
		}
	}
	// After a restart the same upload is a duplicate of the same media.
	startChild(t, addr, staging, storeDir, compressAddr, env)
	if err := testenv.WaitTCP(httpAddr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp = head(whole); resp.StatusCode != 200 || resp.Header.Get("Willow-Media-Id") != wholeID {
		t.Fatalf("HEAD of the committed upload after the kill: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestCommitAfterRecordWithoutJob: a crash between the record and the
// compress job (written alongside it) leaves a staged upload whose record
// says processing and no job; its Commit retried answers the same media and
// journals the job again, so the media still gets its variants.
func TestCommitAfterRecordWithoutJob(t *testing.T) {
	st, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(t, frontOpts{store: st})
	ctx := ctxT(t)
	data := photo(t)
	if _, err := f.begin(ctx, "rj", "kim", data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.send(ctx, "rj", data, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	// What the crashed commit left in the store: the raw and the record.
	key := media.KeyFor("kim", "rj")
	id := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: key}.String()
	rec, _ := json.Marshal(upload.Record{ID: id, Kind: "image", Business: "moments", User: "kim", UploadID: "rj", Size: int64(len(data)),
		SHA256: sum(data), ContentType: "image/jpeg", Location: upload.LocationStore, State: upload.StateProcessing,
		Variants: []upload.VariantEntry{}, Created: time.Now().UTC()})
	if err := st.Put(ctx, media.RawKey(key), bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, media.RecordKey(key), bytes.NewReader(rec), int64(len(rec)), "application/json"); err != nil {
		t.Fatal(err)
	}
	r, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "rj", User: "kim"})
	if err != nil || r.GetMediaId() != id || !r.GetDuplicate() {
		t.Fatalf("Commit = %v, %v", r, err)
	}
	eventually(t, "variants from the journaled job", func() bool {
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		return err == nil && m.GetState() == "ready" && len(m.GetVariants()) > 0
	})
}
