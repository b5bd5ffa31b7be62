package upload_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/store"
	"willow/store/fs"
	"willow/upload"
)

// gatedStore holds the first read of a raw object after arm until
// release: the compress task reading it keeps its worker slot meanwhile.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when the held read begins
	open    chan struct{} // closed by release
}

func (g *gatedStore) arm() {
	g.mu.Lock()
	g.armed, g.entered, g.open = true, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) release() { close(g.open) }

func (g *gatedStore) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	g.mu.Lock()
	hold := g.armed && strings.HasPrefix(key, media.RawKey(""))
	if hold {
		g.armed = false
		close(g.entered)
	}
	open := g.open
	g.mu.Unlock()
	if hold {
		<-open
	}
	return g.Store.Get(ctx, key)
}

// compressResults counts the real compress worker's tasks by result (the
// results seen).
func (f *front) compressResults() map[string]float64 {
	f.t.Helper()
	mfs, err := f.compressNode.Registry().Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	n := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "willow_compress_tasks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && m.GetCounter().GetValue() > 0 {
					n[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestCommitDoesNotWaitForAQueuedCompress: with the compress worker's only
// slot busy, a commit is acknowledged processing without waiting for the
// queue (its CommitWait is a minute), while the commit whose task runs
// still waits for its variants. The queued task runs once the slot frees:
// its variants appear, once, under the same media, and no job is left.
func TestCommitDoesNotWaitForAQueuedCompress(t *testing.T) {
	base, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: base}
	f := newFront(t, frontOpts{store: gs, real: true, realWorkers: 1,
		cfg: upload.Config{CommitWait: time.Minute, CompressTimeout: time.Minute}})
	ctx := ctxT(t)
	data := photo(t)

	type result struct {
		r   *willowv1.CommitResponse
		err error
	}
	commit := func(id string) chan result {
		ch := make(chan result, 1)
		go func() { r, err := f.upload(ctx, id, "alice", data); ch <- result{r, err} }()
		return ch
	}
	gs.arm()
	first := commit("running")
	<-gs.entered // the first task holds the only slot, reading its raw

	second := commit("queued")
	var q result
	select {
	case q = <-second:
	case r := <-first:
		t.Fatalf("the running task's commit returned before its variants: %v, %v", r.r, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the commit waited for a queued compress task")
	}
	if q.err != nil || q.r.GetState() != upload.StateProcessing || len(q.r.GetVariants()) != 0 || q.r.GetDuplicate() {
		t.Fatalf("queued commit = %v, %v; want processing, no variants", q.r, q.err)
	}
	select {
	case r := <-first:
		t.Fatalf("the running task's commit returned before its variants: %v, %v", r.r, r.err)
	default:
	}

	gs.release()
	r := <-first
	if r.err != nil || r.r.GetState() != upload.StateReady || len(r.r.GetVariants()) == 0 {
		t.Fatalf("running commit = %v, %v; want ready with variants", r.r, r.err)
	}
	var m *willowv1.Media
	eventually(t, "the queued upload's variants", func() bool {
		m, err = f.client.GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: q.r.GetMediaId()})
		return err == nil && m.GetState() == upload.StateReady
	})
	if len(m.GetVariants()) == 0 || m.GetSha256() != sum(data) {
		t.Fatalf("queued upload's media = %v", m)
	}
	id, _ := media.Parse(q.r.GetMediaId())
	for _, v := range m.GetVariants() {
		if got := storeBytes(t, f.store, media.VariantKey(id.Key, v.GetName())); int64(len(got)) != v.GetBytes() {
			t.Fatalf("variant %s: %d bytes in the store, record says %d", v.GetName(), len(got), v.GetBytes())
		}
	}
	// The same upload committed again is the same media, ready.
	again, err := f.client.Commit(ctx, &willowv1.CommitRequest{UploadId: "queued", User: "alice"})
	if err != nil || !again.GetDuplicate() || again.GetMediaId() != q.r.GetMediaId() || again.GetState() != upload.StateReady {
		t.Fatalf("commit again = %v, %v", again, err)
	}
	eventually(t, "the journal to empty", func() bool { return f.journalLen() == 0 })
	// Each upload compressed once; the queued one was told not_started once.
	if got := f.compressResults(); got["ok"] != 2 || got["not_started"] != 1 || len(got) != 2 {
		t.Fatalf("compress tasks by result = %v, want ok 2, not_started 1", got)
	}
}

// journalLen is the front's journal depth, as its journal loop last read it.
func (f *front) journalLen() float64 {
	f.t.Helper()
	mfs, err := f.node.Registry().Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "willow_upload_journal_depth" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	f.t.Fatal("no willow_upload_journal_depth")
	return 0
}
