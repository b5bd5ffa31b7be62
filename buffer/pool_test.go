package buffer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"willow/buffer"
)

// clock is a fake time source that ticks one second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

var quiet = slog.New(slog.DiscardHandler)

func open(t testing.TB, dir string, opts buffer.Options) *buffer.Pool {
	t.Helper()
	p, err := buffer.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// blob returns n deterministic bytes for seed.
func blob(seed uint64, n int) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

func mustAppend(t testing.TB, p *buffer.Pool, key string, meta, data []byte) {
	t.Helper()
	if err := p.Append(context.Background(), key, meta, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Append %s: %v", key, err)
	}
}

func read(p *buffer.Pool, key string) ([]byte, buffer.Entry, error) {
	rc, e, err := p.Get(key)
	if err != nil {
		return nil, e, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return b, e, err
}

func mustRead(t testing.TB, p *buffer.Pool, key string, want []byte) {
	t.Helper()
	got, e, err := read(p, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %s: %d bytes differ from the %d appended", key, len(got), len(want))
	}
	if e.Size != int64(len(want)) || e.Key != key {
		t.Fatalf("Get %s: entry %+v", key, e)
	}
}

func segments(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

func TestRoundtrip(t *testing.T) {
	tests := []struct {
		name string
		key  string
		meta []byte
		size int
	}{
		{"empty blob", "raw/00000000000000000000000000000000", nil, 0},
		{"small with meta", "raw/0123456789abcdef0123456789abcdef", []byte(`{"ct":"image/jpeg"}`), 1000},
		{"large streamed", "v/0123456789abcdef0123456789abcdef/medium", []byte("m"), 5<<20 + 3},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			p := open(t, t.TempDir(), buffer.Options{Now: clk.Now})
			data := blob(uint64(i), tc.size)
			mustAppend(t, p, tc.key, tc.meta, data)
			mustRead(t, p, tc.key, data)
			e, err := p.Stat(tc.key)
			if err != nil {
				t.Fatalf("Stat: %v", err)
			}
			want := buffer.Entry{Key: tc.key, Size: int64(tc.size), Meta: tc.meta, AppendedAt: clk.t}
			if e.Key != want.Key || e.Size != want.Size || !bytes.Equal(e.Meta, want.Meta) || !e.AppendedAt.Equal(want.AppendedAt) {
				t.Fatalf("Stat = %+v, want %+v", e, want)
			}
			if s := p.Stats(); s.Items != 1 || s.Bytes != int64(tc.size) || !s.OldestAppendedAt.Equal(clk.t) {
				t.Fatalf("Stats = %+v", s)
			}
			if err := p.Delete(tc.key); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, _, err := p.Get(tc.key); !errors.Is(err, buffer.ErrNotFound) {
				t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
			}
			if _, err := p.Stat(tc.key); !errors.Is(err, buffer.ErrNotFound) {
				t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
			}
			if err := p.Delete(tc.key); err != nil {
				t.Fatalf("second Delete: %v", err)
			}
			if s := p.Stats(); s.Items != 0 || s.Bytes != 0 || !s.OldestAppendedAt.IsZero() || s.DeadBytes == 0 {
				t.Fatalf("Stats after Delete = %+v", s)
			}
		})
	}
}

func TestIdempotentAppend(t *testing.T) {
	p := open(t, t.TempDir(), buffer.Options{})
	a, b := blob(1, 300), blob(2, 500)
	mustAppend(t, p, "k", []byte("a"), a)
	before := p.Stats()
	// The second append is a no-op and must not even read its reader.
	if err := p.Append(context.Background(), "k", []byte("b"), iotest.ErrReader(errors.New("read")), 500); err != nil {
		t.Fatalf("second Append: %v", err)
	}
	mustRead(t, p, "k", a)
	if after := p.Stats(); after != before {
		t.Fatalf("Stats changed by a no-op append: %+v -> %+v", before, after)
	}
	if err := p.Delete("k"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, "k", []byte("b"), b)
	mustRead(t, p, "k", b)
}

func TestFailedAppendLeavesNothing(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	data := blob(3, 4096)
	tests := []struct {
		name string
		ctx  context.Context
		r    io.Reader
		size int64
		want error
	}{
		{"short reader", context.Background(), bytes.NewReader(data[:4000]), 4096, buffer.ErrSizeMismatch},
		{"long reader", context.Background(), bytes.NewReader(data), 4000, buffer.ErrSizeMismatch},
		{"negative size", context.Background(), bytes.NewReader(data), -1, buffer.ErrSizeMismatch},
		{"reader error", context.Background(), io.MultiReader(bytes.NewReader(data[:100]), iotest.ErrReader(io.ErrClosedPipe)), 4096, io.ErrClosedPipe},
		{"cancelled", cancelled, bytes.NewReader(data), 4096, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := open(t, dir, buffer.Options{})
			mustAppend(t, p, "before", nil, data[:10])
			before := p.Stats()
			err := p.Append(tc.ctx, "bad", []byte("meta"), tc.r, tc.size)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Append = %v, want %v", err, tc.want)
			}
			if _, _, err := p.Get("bad"); !errors.Is(err, buffer.ErrNotFound) {
				t.Fatalf("Get after failed Append: %v", err)
			}
			if after := p.Stats(); after != before {
				t.Fatalf("Stats changed: %+v -> %+v", before, after)
			}
			mustAppend(t, p, "after", nil, data)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			p = open(t, dir, buffer.Options{})
			if got := keys(p.List()); !slices.Equal(got, []string{"before", "after"}) {
				t.Fatalf("after reopen List = %v", got)
			}
			mustRead(t, p, "after", data)
		})
	}
}

func keys(es []buffer.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

func TestReopenRecoversIndex(t *testing.T) {
	tests := []struct {
		name string
		sync buffer.SyncPolicy
	}{
		{"SyncEveryAppend", buffer.SyncEveryAppend},
		{"SyncNone", buffer.SyncNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := newClock()
			opts := buffer.Options{Sync: tc.sync, Now: clk.Now, MaxSegmentBytes: 8 << 10}
			p := open(t, dir, opts)
			want := map[string][]byte{}
			for i := range 20 {
				k := fmt.Sprintf("raw/%032x", i)
				want[k] = blob(uint64(i), 100*i)
				mustAppend(t, p, k, []byte(k), want[k])
			}
			for i := 0; i < 20; i += 3 {
				k := fmt.Sprintf("raw/%032x", i)
				if err := p.Delete(k); err != nil {
					t.Fatal(err)
				}
				delete(want, k)
			}
			list, stats := p.List(), p.Stats()
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			p = open(t, dir, opts)
			got := p.List()
			if len(got) != len(list) || len(got) != len(want) {
				t.Fatalf("List after reopen has %d entries, before %d, want %d", len(got), len(list), len(want))
			}
			for i := range got {
				if got[i].Key != list[i].Key || got[i].Size != list[i].Size || !bytes.Equal(got[i].Meta, list[i].Meta) || !got[i].AppendedAt.Equal(list[i].AppendedAt) {
					t.Fatalf("entry %d: %+v, before reopen %+v", i, got[i], list[i])
				}
				mustRead(t, p, got[i].Key, want[got[i].Key])
			}
			if s := p.Stats(); s != stats {
				t.Fatalf("Stats after reopen %+v, before %+v", s, stats)
			}
		})
	}
}

func TestOpenLocksDirectory(t *testing.T) {
	dir := t.TempDir()
	p := open(t, dir, buffer.Options{})
	if q, err := buffer.Open(dir, buffer.Options{}); err == nil {
		q.Close()
		t.Fatal("second Open of a pool in use succeeded")
	}
	p.Close()
	open(t, dir, buffer.Options{})
}

func TestClosed(t *testing.T) {
	p := open(t, t.TempDir(), buffer.Options{})
	mustAppend(t, p, "k", nil, []byte("x"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{
		"Append":  p.Append(context.Background(), "j", nil, bytes.NewReader(nil), 0),
		"Delete":  p.Delete("k"),
		"Stat":    func() error { _, err := p.Stat("k"); return err }(),
		"Get":     func() error { _, _, err := p.Get("k"); return err }(),
		"Compact": p.Compact(context.Background()),
	}
	for name, err := range checks {
		if !errors.Is(err, buffer.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestTornTail cuts the segment file at every offset inside its last record,
// as a crash mid-write would, and checks Open truncates the torn record and
// serves everything before it intact.
func TestTornTail(t *testing.T) {
	a, b, c := blob(10, 700), blob(11, 1), blob(12, 900)
	tests := []struct {
		name string
		last func(t *testing.T, p *buffer.Pool) // the record to tear
		want map[string][]byte                  // live after the cut
	}{
		{"blob record", func(t *testing.T, p *buffer.Pool) { mustAppend(t, p, "v/c/medium", []byte(`{"x":1}`), c) },
			map[string][]byte{"raw/a": a, "raw/b": b}},
		{"tombstone", func(t *testing.T, p *buffer.Pool) {
			if err := p.Delete("raw/a"); err != nil {
				t.Fatal(err)
			}
		}, map[string][]byte{"raw/a": a, "raw/b": b}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			p := open(t, src, buffer.Options{})
			mustAppend(t, p, "raw/a", []byte("meta-a"), a)
			mustAppend(t, p, "raw/b", nil, b)
			p.Close()
			segs := segments(t, src)
			if len(segs) != 1 {
				t.Fatalf("want 1 segment, have %v", segs)
			}
			fi, err := os.Stat(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			start := fi.Size()
			p = open(t, src, buffer.Options{})
			tc.last(t, p)
			p.Close()
			full, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(full)) <= start {
				t.Fatal("last record not written")
			}
			dir := t.TempDir()
			seg := filepath.Join(dir, filepath.Base(segs[0]))
			for cut := start; cut < int64(len(full)); cut++ {
				if err := os.WriteFile(seg, full[:cut], 0o644); err != nil {
					t.Fatal(err)
				}
				reg := prometheus.NewRegistry()
				p, err := buffer.Open(dir, buffer.Options{Registerer: reg, Logger: quiet})
				if err != nil {
					t.Fatalf("cut %d: Open: %v", cut, err)
				}
				if got := keys(p.List()); len(got) != len(tc.want) {
					t.Fatalf("cut %d: List = %v", cut, got)
				}
				for k, v := range tc.want {
					mustRead(t, p, k, v)
				}
				if _, _, err := p.Get("v/c/medium"); !errors.Is(err, buffer.ErrNotFound) {
					t.Fatalf("cut %d: torn record served: %v", cut, err)
				}
				if fi, err := os.Stat(seg); err != nil || fi.Size() != start {
					t.Fatalf("cut %d: segment not truncated to %d: %v %v", cut, start, fi.Size(), err)
				}
				wantTorn := 1.0
				if cut == start {
					wantTorn = 0
				}
				if n := counter(t, reg, "willow_buffer_corrupt_records_truncated_total"); n != wantTorn {
					t.Fatalf("cut %d: corrupt counter = %v, want %v", cut, n, wantTorn)
				}
				if cut%50 == 0 { // the pool keeps working after recovery
					mustAppend(t, p, "after", nil, c)
					p.Close()
					p = open(t, dir, buffer.Options{Logger: quiet})
					mustRead(t, p, "after", c)
				}
				p.Close()
			}
		})
	}
}

// counter returns the sum of a metric's samples in reg (all pools).
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func TestFlippedByte(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{"small blob", 2000},
		{"large blob", 5 << 20},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			reg := prometheus.NewRegistry()
			p := open(t, dir, buffer.Options{Registerer: reg, Logger: quiet})
			first, victim, last := blob(uint64(i), 100), blob(uint64(i+1), tc.size), blob(uint64(i+2), 100)
			mustAppend(t, p, "first", nil, first)
			mustAppend(t, p, "victim", nil, victim)
			mustAppend(t, p, "last", nil, last)
			seg := segments(t, dir)[0]
			full, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(full, victim) + tc.size/2
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{full[at] ^ 0x10}, int64(at)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, _, err := read(p, "victim"); !errors.Is(err, buffer.ErrCorrupt) {
				t.Fatalf("Get of flipped blob = %v, want ErrCorrupt", err)
			}
			mustRead(t, p, "first", first)
			mustRead(t, p, "last", last)
			p.Close()

			// After a restart the corrupt record is dropped and counted;
			// its neighbours survive.
			reg = prometheus.NewRegistry()
			p = open(t, dir, buffer.Options{Registerer: reg, Logger: quiet})
			if _, _, err := read(p, "victim"); err == nil {
				t.Fatal("flipped blob served after reopen")
			}
			mustRead(t, p, "first", first)
			mustRead(t, p, "last", last)
			if n := counter(t, reg, "willow_buffer_corrupt_records_truncated_total"); n != 1 {
				t.Fatalf("corrupt counter = %v, want 1", n)
			}
		})
	}
}

func TestConcurrentAppendGet(t *testing.T) {
	p := open(t, t.TempDir(), buffer.Options{MaxSegmentBytes: 64 << 10, Sync: buffer.SyncNone})
	const writers, perWriter = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter*2)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := fmt.Sprintf("raw/%d-%d", w, i)
				data := blob(uint64(w*1000+i), 1+(i*997)%9000)
				if err := p.Append(context.Background(), k, []byte(k), bytes.NewReader(data), int64(len(data))); err != nil {
					errs <- err
					return
				}
				// The writer's own earlier keys and someone else's.
				for _, j := range []int{i, i / 2} {
					if j%7 == 0 {
						continue // possibly deleted by the next writer
					}
					k := fmt.Sprintf("raw/%d-%d", w, j)
					got, _, err := read(p, k)
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, blob(uint64(w*1000+j), 1+(j*997)%9000)) {
						errs <- fmt.Errorf("%s: wrong bytes", k)
					}
				}
				if i%7 == 0 {
					if err := p.Delete(fmt.Sprintf("raw/%d-%d", (w+1)%writers, i)); err != nil {
						errs <- err
					}
				}
			}
		})
	}
	wg.Add(1)
	go func() { // a reader walking the list while it changes
		defer wg.Done()
		for range 20 {
			for _, e := range p.List() {
				if _, _, err := read(p, e.Key); err != nil && !errors.Is(err, buffer.ErrNotFound) {
					errs <- err
				}
			}
			p.Stats()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSegmentRolling(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	opts := buffer.Options{MaxSegmentBytes: max}
	p := open(t, dir, opts)
	want := map[string][]byte{}
	for i := range 30 {
		k := fmt.Sprintf("raw/%d", i)
		n := 10 << 10
		if i == 17 {
			n = 100 << 10 // larger than a segment: gets one of its own
		}
		want[k] = blob(uint64(i), n)
		mustAppend(t, p, k, nil, want[k])
	}
	segs := segments(t, dir)
	if s := p.Stats(); s.Segments != len(segs) || len(segs) < 5 {
		t.Fatalf("Stats.Segments = %d, files %d", s.Segments, len(segs))
	}
	big := 0
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > max {
			big++
		}
	}
	if big != 1 {
		t.Fatalf("%d segments over MaxSegmentBytes, want only the one with the oversized blob", big)
	}
	p.Close()
	p = open(t, dir, opts)
	for k, v := range want {
		mustRead(t, p, k, v)
	}
}

func TestCompact(t *testing.T) {
	tests := []struct {
		name     string
		deleteIf func(i int) bool
	}{
		{"oldest drained", func(i int) bool { return i < 20 }},
		{"all drained", func(i int) bool { return true }},
		{"every other", func(i int) bool { return i%2 == 0 }},
		{"newest drained", func(i int) bool { return i >= 10 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := buffer.Options{MaxSegmentBytes: 16 << 10}
			p := open(t, dir, opts)
			want := map[string][]byte{}
			for i := range 30 {
				k := fmt.Sprintf("raw/%d", i)
				want[k] = blob(uint64(i), 5000)
				mustAppend(t, p, k, nil, want[k])
			}
			for i := range 30 {
				if k := fmt.Sprintf("raw/%d", i); tc.deleteIf(i) {
					if err := p.Delete(k); err != nil {
						t.Fatal(err)
					}
					delete(want, k)
				}
			}
			before := p.Stats()
			if err := p.Compact(context.Background()); err != nil {
				t.Fatalf("Compact: %v", err)
			}
			after := p.Stats()
			if after.Items != before.Items || after.Bytes != before.Bytes || after.Segments != len(segments(t, dir)) {
				t.Fatalf("Stats %+v -> %+v", before, after)
			}
			if len(want) == 0 && (after.Segments != 0 || after.DeadBytes != 0) {
				t.Fatalf("empty pool kept files: %+v", after)
			}
			if len(want) < 30 && tc.name != "every other" && after.Segments >= before.Segments {
				t.Fatalf("Compact removed no segment: %+v -> %+v", before, after)
			}
			check := func() {
				t.Helper()
				for i := range 30 {
					k := fmt.Sprintf("raw/%d", i)
					if v, ok := want[k]; ok {
						mustRead(t, p, k, v)
					} else if _, _, err := p.Get(k); !errors.Is(err, buffer.ErrNotFound) {
						t.Fatalf("deleted %s: %v", k, err)
					}
				}
			}
			check()
			mustAppend(t, p, "raw/new", nil, []byte("new"))
			want["raw/new"] = []byte("new")
			p.Close()
			p = open(t, dir, opts) // no deleted blob comes back
			check()
			if s := p.Stats(); s.Items != len(want) {
				t.Fatalf("after reopen %d items, want %d", s.Items, len(want))
			}
		})
	}
}

// TestReadDuringCompact: a reader opened before its blob is deleted and its
// segment removed keeps reading the right bytes.
func TestReadDuringCompact(t *testing.T) {
	p := open(t, t.TempDir(), buffer.Options{MaxSegmentBytes: 1 << 20})
	data := blob(7, 6<<20) // streamed path
	mustAppend(t, p, "big", nil, data)
	mustAppend(t, p, "next", nil, []byte("x")) // rolls: "big" is alone
	rc, _, err := p.Get("big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete("big"); err != nil {
		t.Fatal(err)
	}
	if err := p.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Segments != 1 {
		t.Fatalf("segments after compact = %d, want 1", s.Segments)
	}
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(head, rest...), data) {
		t.Fatal("reader got wrong bytes after compaction")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p1 := open(t, t.TempDir(), buffer.Options{Registerer: reg, Name: "pool1", Now: clk})
	p2 := open(t, t.TempDir(), buffer.Options{Registerer: reg, Name: "pool2", Now: clk})
	mustAppend(t, p1, "a", nil, make([]byte, 100))
	mustAppend(t, p1, "b", nil, make([]byte, 50))
	mustAppend(t, p2, "c", nil, make([]byte, 7))
	if err := p1.Delete("a"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	want := map[string]float64{
		"willow_buffer_items":                   2,
		"willow_buffer_bytes":                   57,
		"willow_buffer_appends_total":           3,
		"willow_buffer_deletes_total":           1,
		"willow_buffer_oldest_item_age_seconds": 20, // 10 s in each pool
	}
	for name, v := range want {
		if got := counter(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	p1.Close()
	if got := counter(t, reg, "willow_buffer_items"); got != 1 {
		t.Errorf("after closing pool1, items = %v, want pool2's 1", got)
	}
	open(t, t.TempDir(), buffer.Options{Registerer: reg, Name: "pool1"}) // re-registers
}

// TestCompactRewrite: sparse sealed segments have their live blobs moved
// and are removed; order, contents and deletes survive later deletes,
// compactions and restarts.
func TestCompactRewrite(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	opts := buffer.Options{MaxSegmentBytes: 16 << 10, Now: clk.Now}
	p := open(t, dir, opts)
	want := map[string][]byte{}
	var order []string
	for i := range 40 {
		k := fmt.Sprintf("raw/%02d", i)
		want[k] = blob(uint64(i), 5000)
		mustAppend(t, p, k, []byte("meta-"+k), want[k])
		if i%4 == 0 {
			order = append(order, k)
		}
	}
	for i := range 40 {
		if i%4 != 0 {
			k := fmt.Sprintf("raw/%02d", i)
			if err := p.Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		}
	}
	check := func(stage string) {
		t.Helper()
		if got := keys(p.List()); !slices.Equal(got, order) {
			t.Fatalf("%s: List = %v, want %v", stage, got, order)
		}
		for _, e := range p.List() {
			if string(e.Meta) != "meta-"+e.Key {
				t.Fatalf("%s: %s meta %q", stage, e.Key, e.Meta)
			}
			mustRead(t, p, e.Key, want[e.Key])
		}
		for i := range 40 {
			k := fmt.Sprintf("raw/%02d", i)
			if _, ok := want[k]; !ok {
				if _, _, err := p.Get(k); !errors.Is(err, buffer.ErrNotFound) {
					t.Fatalf("%s: deleted %s: %v", stage, k, err)
				}
			}
		}
	}
	before := p.Stats()
	if err := p.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := p.Stats()
	if after.Segments*2 > before.Segments || after.DeadBytes*4 > before.DeadBytes {
		t.Fatalf("Compact did not rewrite sparse segments: %+v -> %+v", before, after)
	}
	check("after compact")
	p.Close()
	p = open(t, dir, opts)
	check("after reopen")
	if s := p.Stats(); s.Items != after.Items || s.Bytes != after.Bytes {
		t.Fatalf("Stats after reopen %+v, before %+v", s, after)
	}
	// Delete moved blobs, compact and restart: they stay deleted even
	// though older segments may have held copies of them.
	for _, k := range order[:5] {
		if err := p.Delete(k); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	order = order[5:]
	if err := p.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("after second compact")
	p.Close()
	p = open(t, dir, opts)
	check("after second reopen")
}

// TestRandomOpsMatchModel runs a seeded random mix of appends, deletes,
// compactions and restarts against a map and checks the pool agrees after
// every compaction and restart. (Seed 6 catches a deleted blob coming back
// when a tombstone does not outlive the stale copies Compact leaves.)
func TestRandomOpsMatchModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			dir := t.TempDir()
			opts := buffer.Options{MaxSegmentBytes: 8 << 10, Sync: buffer.SyncNone, Now: newClock().Now}
			p := open(t, dir, opts)
			model := map[string][]byte{}
			var order []string // live keys, oldest first
			verify := func(stage string) {
				t.Helper()
				if got := keys(p.List()); !slices.Equal(got, order) {
					t.Fatalf("%s: List = %v, want %v", stage, got, order)
				}
				for k, v := range model {
					mustRead(t, p, k, v)
				}
			}
			for op := range 1000 {
				k := fmt.Sprintf("k%02d", rng.IntN(30))
				switch n := rng.IntN(20); {
				case n < 11:
					v := blob(rng.Uint64(), rng.IntN(3000))
					mustAppend(t, p, k, nil, v)
					if _, live := model[k]; !live {
						model[k] = v
						order = append(order, k)
					}
				case n < 18:
					if err := p.Delete(k); err != nil {
						t.Fatal(err)
					}
					if _, live := model[k]; live {
						delete(model, k)
						order = slices.DeleteFunc(order, func(s string) bool { return s == k })
					}
				case n < 19:
					if err := p.Compact(context.Background()); err != nil {
						t.Fatal(err)
					}
					verify(fmt.Sprintf("op %d compact", op))
				default:
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
					p = open(t, dir, opts)
					verify(fmt.Sprintf("op %d reopen", op))
				}
			}
			p.Close()
			p = open(t, dir, opts)
			verify("end")
		})
	}
}
