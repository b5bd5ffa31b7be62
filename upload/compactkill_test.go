package upload_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"willow/buffer"
	"willow/internal/testenv"
	"willow/media"
	"willow/node"
	willowv1 "willow/proto/willow/v1"
	"willow/store/fs"
)

// activeSegment is the newest segment file of a pool directory and its
// size (0 when there is none).
func activeSegment(dir string) (string, int64) {
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 {
		return "", 0
	}
	sort.Strings(segs)
	fi, err := os.Stat(segs[len(segs)-1])
	if err != nil {
		return "", 0
	}
	return segs[len(segs)-1], fi.Size()
}

// TestKill9MidCompaction runs an upload front as a child process with pool
// 1 full (small segments), drains it slowly so its background compaction
// keeps moving the live items of sparse segments, and SIGKILLs the front
// while a compaction is copying (the active segment grows by an item's
// size while nothing is uploaded: only a compaction's copy writes that
// much). After each kill it checks, with the front down, that every
// acknowledged upload is in pool 1 or in the store with its bytes, that
// pool 1 holds only intact items and never one it had given up before
// (nothing deleted comes back); at the end that every upload is in the
// store once, with its one media ID, and the pool's disk is given back.
func TestKill9MidCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 child-process test")
	}
	dir := t.TempDir()
	staging, storeDir, pools := filepath.Join(dir, "staging"), filepath.Join(dir, "store"), filepath.Join(dir, "pools")
	pool1 := filepath.Join(pools, "pool1")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	compressAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // never up: no variants
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const segBytes = 2 << 20 // three photos a segment: two drained leave one to move
	env := []string{"CHILD_POOLS=" + pools, "CHILD_SEG_BYTES=" + strconv.Itoa(segBytes), "CHILD_COMPACT_DEAD=1"}
	child := startChild(t, addr, staging, storeDir, compressAddr, append(env, "CHILD_KNOBS=pool1=force,pool1_drain_per_s=0")...)
	conn, err := node.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f := &front{t: t, client: willowv1.NewUploadClient(conn)}
	data := photo(t)
	const n = 24
	bodies := map[string][]byte{} // media key -> bytes
	ids := map[string]string{}    // upload ID -> media ID
	for i := range n {
		up := fmt.Sprint("ck", i)
		body := append(append([]byte(nil), data...), byte(i)) // distinct bytes per upload
		r := f.mustUpload(ctx, up, "ned", body)
		if r.GetLocation() != "pool1" {
			t.Fatalf("pool1=force: location %q", r.GetLocation())
		}
		mid, err := media.Parse(r.GetMediaId())
		if err != nil {
			t.Fatal(err)
		}
		bodies[mid.Key], ids[up] = body, r.GetMediaId()
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	st, err := fs.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}

	// inPool opens pool 1 (the front is down), checks every item is whole
	// and one of ours, and returns the media keys it holds.
	inPool := func(round int) map[string]bool {
		t.Helper()
		p, err := buffer.Open(pool1, buffer.Options{Name: "pool1", MaxSegmentBytes: segBytes})
		if err != nil {
			t.Fatalf("round %d: open pool 1 after the kill: %v", round, err)
		}
		defer p.Close()
		keys := map[string]bool{}
		for _, e := range p.List() {
			k, ok := strings.CutPrefix(e.Key, "raw/")
			if !ok {
				continue
			}
			rc, _, err := p.Get(e.Key)
			if err != nil {
				t.Fatalf("round %d: pool 1 lists %s but: %v", round, e.Key, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, bodies[k]) {
				t.Fatalf("round %d: pool 1 item %s not intact (%d bytes, %v)", round, k, len(got), err)
			}
			keys[k] = true
		}
		return keys
	}
	prev := inPool(-1)
	if len(prev) != n {
		t.Fatalf("pool 1 holds %d items after the fill, want %d", len(prev), n)
	}
	midKills, kills := 0, 0
	for round := 0; round < 8 && len(prev) > 3 && midKills < 3; round++ {
		child = startChild(t, addr, staging, storeDir, compressAddr, append(env, "CHILD_KNOBS=pool1=force,pool1_drain_per_s=2")...)
		seg, size := activeSegment(pool1)
		note := "no compaction copy seen within 10 s"
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			s2, z2 := activeSegment(pool1)
			grew := z2 - size
			if s2 != seg {
				grew = 0
				if s2 > seg {
					grew = z2 // a new segment started; its first record
				}
			}
			seg, size = s2, z2
			if grew >= int64(len(data))/2 {
				note = fmt.Sprintf("mid-compaction: %s grew %d bytes in the last millisecond", filepath.Base(s2), grew)
				midKills++
				break
			}
		}
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		kills++
		now := inPool(round)
		for k := range now {
			if !prev[k] {
				t.Fatalf("round %d: item %s is back in pool 1 after it had left it", round, k)
			}
		}
		// Whatever left the pool is in the store, whole.
		for k := range bodies {
			if !now[k] && !bytes.Equal(storeBytes(t, st, media.RawKey(k)), bodies[k]) {
				t.Fatalf("round %d: %s is neither in pool 1 nor in the store intact", round, k)
			}
		}
		t.Logf("round %d: kill -9 %s; pool 1 %d -> %d items", round, note, len(prev), len(now))
		prev = now
	}
	if midKills == 0 {
		t.Fatal("no kill landed during a compaction copy")
	}

	// A last start drains the rest; the compaction gives the disk back.
	startChild(t, addr, staging, storeDir, compressAddr, append(env, "CHILD_KNOBS=pool1=off,pool1_drain_per_s=1000")...)
	dr, err := f.client.Drain(ctx, &willowv1.DrainRequest{Pool: 1, Wait: true})
	if err != nil || dr.GetRemaining() != 0 {
		t.Fatalf("Drain after the kills = %v, %v", dr, err)
	}
	eventually(t, "pool 1 directory back near empty", func() bool { return diskUse(t, pool1) < 64<<10 })
	raws, err := os.ReadDir(filepath.Join(storeDir, "objects", "raw"))
	if err != nil {
		t.Fatal(err)
	}
	var stored int
	for _, e := range raws {
		if !strings.HasPrefix(e.Name(), ".") && !strings.HasSuffix(e.Name(), ".meta") { // fs store: content-type sidecars
			stored++
		}
	}
	if stored != n {
		t.Fatalf("store holds %d raw objects, want %d (one per upload)", stored, n)
	}
	for up, id := range ids {
		mid, _ := media.Parse(id)
		if !bytes.Equal(storeBytes(t, st, media.RawKey(mid.Key)), bodies[mid.Key]) {
			t.Fatalf("%s: wrong raw in the store", up)
		}
		m, err := f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id})
		if err != nil || m.GetLocation() != "store" {
			t.Fatalf("%s: GetMedia = %v, %v", up, m, err)
		}
		body := bodies[mid.Key]
		b, err := f.client.Begin(ctx, &willowv1.BeginRequest{UploadId: up, Token: tok(t, "ned", "moments"), Business: "moments",
			User: "ned", Kind: willowv1.Kind_KIND_IMAGE, Size: int64(len(body)), Sha256: sum(body)})
		if err != nil || !b.GetCommitted() || b.GetMediaId() != id {
			t.Fatalf("%s: Begin again = %v, %v (want the one media %s)", up, b, err, id)
		}
	}
	t.Logf("%d kills, %d of them during a compaction copy; %d uploads in the store once each", kills, midKills, n)
}
