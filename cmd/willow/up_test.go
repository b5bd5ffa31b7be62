package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"willow/cluster"
	"willow/internal/testenv"
)

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUpOnRedisCluster runs `willow up --redis redis-cluster://...` on a
// real 3-master Redis Cluster (it was a nil-pointer panic) and drives it
// through the CLI: upload and download (the upload journal and the
// master's registry in the cluster), the timeline, and a flex change.
func TestUpOnRedisCluster(t *testing.T) {
	rc := testenv.StartRedisCluster(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
		done <- m.Run(ctx, []string{"up", "--dir", dir, "--redis", rc.URL})
	}()
	t.Cleanup(func() { cancel(); <-done })
	cf := filepath.Join(dir, "cluster.json")
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "one-box cluster up") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("willow up exited %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("willow up not up after 90 s: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	f, err := cluster.LoadFile(cf)
	if err != nil || f.Redis != rc.URL {
		t.Fatalf("cluster.json: %+v, %v; want redis %s", f, err, rc.URL)
	}

	photo := "../../../shared/testdata/photos/mate_LadyBird.jpg"
	stdout, errs, code := run(t, "upload", "--cluster", cf, "--upload-id", "rc-1", "--user", "alice", photo)
	if code != 0 {
		t.Fatalf("upload exit %d: %s", code, errs)
	}
	var res struct{ ID string }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.ID == "" {
		t.Fatalf("upload output %q: %v", stdout, err)
	}
	thumb := filepath.Join(t.TempDir(), "thumb.jpg")
	for {
		_, errs, code = run(t, "download", res.ID, "--variant", "thumb", "--user", "alice", "-o", thumb, "--cluster", cf)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("download thumb: exit %d: %s", code, errs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b, err := os.ReadFile(thumb); err != nil || len(b) == 0 {
		t.Fatalf("thumb: %d bytes, %v", len(b), err)
	}

	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"timeline", "follow", "bob", "alice"}, "bob follows alice"},
		// With the media: the timeline checks its owner on the upload front
		// with its node credentials.
		{[]string{"timeline", "publish", "alice", "p1", res.ID}, "delivered 2 held 0"},
		{[]string{"timeline", "poll", "bob"}, "alice p1"},
		{[]string{"flex", "set", "yellow", "--reason", "rehearsal"}, ""},
		{[]string{"flex", "status"}, "level yellow"},
	} {
		stdout, errs, code := run(t, append(s.args, "--cluster", cf)...)
		if code != 0 || !strings.Contains(stdout, s.want) {
			t.Errorf("willow %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(s.args, " "), code, stdout, errs, s.want)
		}
	}
	// The state is in the cluster, spread over its masters.
	c := rc.Client(t)
	for _, key := range []string{"{willow:}flex:doc", "{willow:}nodes", "willow:tl:in:{bob}"} {
		if n, err := c.Exists(context.Background(), key).Result(); err != nil || n != 1 {
			t.Errorf("%s in the cluster: %d, %v", key, n, err)
		}
	}
}
