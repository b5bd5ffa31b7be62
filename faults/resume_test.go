package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"willow/client"
	"willow/media"
	"willow/token"
)

// gatedFile is an io.ReaderAt over data whose reads at or past gate block,
// once armed, until release is closed; reached is closed when the first
// such read comes.
type gatedFile struct {
	data    []byte
	gate    int64
	armed   chan struct{}
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedFile) ReadAt(p []byte, off int64) (int, error) {
	select {
	case <-g.armed:
		if off >= g.gate {
			g.once.Do(func() { close(g.reached) })
			<-g.release
		}
	default:
	}
	return bytes.NewReader(g.data).ReadAt(p, off)
}

// noisePNG is a valid, incompressible PNG of about w*h*3 bytes.
func noisePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(21, 4))
	for i := 0; i < len(img.Pix); i += 4 {
		v := r.Uint32()
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = byte(v), byte(v>>8), byte(v>>16), 255
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestResumeAfterKill9 is issue 21's resume test on deploy/local: the SDK
// begins an upload on a front of region a, sends half, the front is
// killed with kill -9, and the SDK's normal failover continues the same
// session on the other front of region a from the region's durable
// offset. The media downloads with the right SHA-256, and the bytes sent
// show no restart from zero. It runs in `make test` (about a minute,
// mostly deploy/local's start).
func TestResumeAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts deploy/local")
	}
	data := noisePNG(t, 2600, 2600) // about 20 MB: two SyncEvery (8 MiB) points before the half
	size := int64(len(data))
	half := size / 2 / client.ChunkSize * client.ChunkSize
	sum := sha256.Sum256(data)
	shaHex := hex.EncodeToString(sum[:])

	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := &gatedFile{data: data, gate: half, armed: make(chan struct{}), reached: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(g.release) }) }
	defer release()
	const user, uploadID = "u-resume", "resume-kill9"
	key := media.KeyFor(user, uploadID)
	cl := *c.client
	cl.Token = func(u, b string) (string, error) {
		// The SDK asks for the token after hashing the file: from here
		// on, reads past the half wait for the kill.
		select {
		case <-g.armed:
		default:
			close(g.armed)
		}
		return token.Sign(c.secret, u, b, time.Now().Add(time.Hour))
	}
	type result struct {
		res *client.UploadResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cl.Upload(client.WithRequest(ctx, "moments", user), g, size,
			client.UploadOptions{UploadID: uploadID, User: user, Business: "moments", Filename: "noise.png"})
		done <- result{res, err}
	}()
	select {
	case <-g.reached:
	case r := <-done:
		t.Fatalf("upload ended before the half: %+v %v", r.res, r.err)
	case <-ctx.Done():
		t.Fatal("the SDK never read past the half")
	}
	// Which front of region a holds it, and has its first half mirrored
	// to the region's store (versitygw's posix backend keeps objects as
	// files)?
	first := ""
	for _, name := range []string{"upload-a-1", "upload-a-2"} {
		if _, err := os.Stat(filepath.Join(c.dir, "data", name, "staging", "up", key)); err == nil {
			first = name
		}
	}
	if first == "" {
		t.Fatal("no front of region a staged the upload")
	}
	rec := filepath.Join(c.dir, "data", "s3", "willow", "staging", key, "session.json")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(rec); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session record in the store 20 s after half was sent (%s)", rec)
		}
	}
	killT := c.kill(first)
	release()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the upload did not finish after the kill")
	}
	if r.err != nil {
		t.Fatalf("upload after kill -9 of %s: %v", first, r.err)
	}
	res := r.res
	t.Logf("upload %s done %v after kill -9 of %s; fronts %v, sent %d of %d bytes", res.ID, time.Since(killT).Round(10*time.Millisecond), first, res.Fronts, res.SentBytes, size)
	second := "upload-a-2"
	if first == "upload-a-2" {
		second = "upload-a-1"
	}
	if len(res.Fronts) != 2 || res.Fronts[0] != first || res.Fronts[1] != second || res.Region != "a" {
		t.Fatalf("fronts tried %v in region %s, want [%s %s] in region a", res.Fronts, res.Region, first, second)
	}
	id, err := media.Parse(res.ID)
	if err != nil || id.Key != key || id.Node != second {
		t.Fatalf("media ID %s: want region a, node %s, key %s (%v)", res.ID, second, key, err)
	}
	// Before the kill at least [0, half) was sent (the SDK may push a few
	// more chunks into the dying stream before it sees the failure:
	// timing, not the server); after it, [resumed, size). From zero it
	// would be at least half + size, so less proves a resume, and
	// half + size - sent is a lower bound of the offset resumed from.
	resumed := half + size - res.SentBytes
	if resumed <= 0 || resumed > half {
		t.Fatalf("sent %d bytes in all for %d: resumed at %d or lower, want a resume above 0 and at most the half (%d)", res.SentBytes, size, resumed, half)
	}
	t.Logf("resumed on %s at offset %d or higher: at least %d bytes not sent again", second, resumed, resumed)
	h := sha256.New()
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	if _, err := c.client.Download(client.WithRequest(dctx, "moments", user), res.ID, "raw", h); err != nil {
		t.Fatalf("download %s: %v", res.ID, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != shaHex {
		t.Fatalf("download %s sha256 %s, want %s", res.ID, got, shaHex)
	}
	// The same upload ID again: the same media.
	again, err := c.client.Upload(client.WithRequest(ctx, "moments", user), bytes.NewReader(data), size,
		client.UploadOptions{UploadID: uploadID, User: user, Business: "moments", Filename: "noise.png"})
	if err != nil || again.ID != res.ID || !again.Duplicate {
		t.Fatalf("the same upload ID again: %+v %v; want duplicate %s", again, err, res.ID)
	}
}
