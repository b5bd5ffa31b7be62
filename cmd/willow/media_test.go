package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/compress"
	"willow/media"
	"willow/node"
	"willow/store/fs"
	"willow/upload"
)

// TestMediaCLI: `willow media status ID --json` prints one object with
// state, reason and variants; `willow media retry ID` takes a failed item
// back to processing and refuses one that is not failed.
func TestMediaCLI(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	un, err := node.New(node.Config{ID: "upload-a-1", Role: "upload", Region: "a", Logger: quiet, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := fs.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	us, err := upload.New(upload.Config{Secret: []byte("s"), StagingDir: filepath.Join(dir, "staging"), RetryMin: time.Hour, RetryMax: time.Hour},
		upload.Deps{Node: un, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	for _, run := range []func(context.Context) error{un.Run, us.Run} {
		go func() { _ = run(ctx); done <- struct{}{} }()
	}
	key := media.KeyFor("u1", "up-1")
	id := media.ID{Loc: media.LocStore, Region: "a", Node: "upload-a-1", Key: key}.String()
	rec, _ := json.Marshal(upload.Record{ID: id, Kind: "image", Business: "moments", User: "u1", UploadID: "up-1", Size: 10,
		Location: upload.LocationStore, State: upload.StateFailed, Reason: compress.ReasonCorruptMedia, Error: "jpeg: premature end", Variants: []upload.VariantEntry{}})
	if err := st.Put(ctx, media.RecordKey(key), bytes.NewReader(rec), int64(len(rec)), "application/json"); err != nil {
		t.Fatal(err)
	}
	status := func() mediaLine {
		t.Helper()
		out, errs, code := runCLI(t, "media", "status", id, "--addr", un.Addr(), "--json")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, errs)
		}
		var l mediaLine
		if err := json.Unmarshal([]byte(out), &l); err != nil || strings.Count(out, "\n") != 1 {
			t.Fatalf("status --json is not one object: %q %v", out, err)
		}
		return l
	}
	if l := status(); l.State != "failed" || l.Reason != compress.ReasonCorruptMedia || l.Error == "" || l.Variants == nil {
		t.Fatalf("status = %+v", l)
	}
	out, errs, code := runCLI(t, "media", "status", id, "--addr", un.Addr())
	if code != 0 || !strings.Contains(out, "failed corrupt_media") {
		t.Fatalf("table: exit %d: %s%s", code, out, errs)
	}
	if out, errs, code := runCLI(t, "media", "retry", id, "--addr", un.Addr(), "--json"); code != 0 || !strings.Contains(out, `"state":"processing"`) {
		t.Fatalf("retry: exit %d: %s%s", code, out, errs)
	}
	if l := status(); l.State != "processing" || l.Reason != "" {
		t.Fatalf("after retry: %+v", l)
	}
	if _, errs, code := runCLI(t, "media", "retry", id, "--addr", un.Addr()); code != 1 || !strings.Contains(errs, "not_failed") {
		t.Fatalf("retry of a processing item: exit %d: %s", code, errs)
	}
	if _, errs, code := runCLI(t, "media", "status", "bogus", "--addr", un.Addr()); code != 1 || !strings.Contains(errs, "bad_media_id") {
		t.Fatalf("bad id: exit %d: %s", code, errs)
	}
	if _, _, code := runCLI(t, "media"); code != 2 {
		t.Fatalf("no subcommand: exit %d, want 2", code)
	}
}
