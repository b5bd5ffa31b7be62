package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"willow/cluster"
	"willow/flex"
	"willow/internal/testenv"
)

// TestUpOnRedisCluster runs `willow up --redis redis-cluster://...` on a
// real 3-master Redis Cluster (it was a nil-pointer panic) and drives it
// through the CLI: upload and download (the upload journal and the
// master's registry in the cluster), the timeline, and a flex change.
func TestUpOnRedisCluster(t *testing.T) {
	rc := testenv.StartRedisCluster(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testenv.SyncBuffer
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

	checkBanner(t, out.String(), time.Now().Add(90*time.Second))

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

// checkBanner runs the commands of `willow up`'s banner in bash exactly as
// printed (with this test binary as `willow` on the PATH, and PHOTO.jpg a
// real photo in the working directory), and checks that every file they
// write holds what its extension says.
func checkBanner(t *testing.T, out string, deadline time.Time) {
	t.Helper()
	bash, jq := testenv.LookPath(t, "bash"), testenv.LookPath(t, "jq")
	testenv.LookPath(t, "curl")
	grpcurl := testenv.LookPath(t, "grpcurl")
	_, banner, ok := strings.Cut(out, "\ntry (")
	if !ok {
		t.Fatalf("no banner in %q", out)
	}
	var lines []string
	for _, l := range strings.Split(banner, "\n")[1:] {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "ID=$(willow upload") || !strings.Contains(lines[0], "| jq -r .id") {
		t.Fatalf("banner commands %q", lines)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, work := t.TempDir(), t.TempDir()
	wrapper := "#!/bin/sh\n" + cliAsMain + "=1 exec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "willow"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	photo, err := os.ReadFile("../../../shared/testdata/photos/mate_LadyBird.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "PHOTO.jpg"), photo, 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) (string, error) {
		cmd := exec.Command(bash, "-euo", "pipefail", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+filepath.Dir(jq)+":"+filepath.Dir(grpcurl)+":"+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// The upload line sets $ID; the others run after it, each retried
	// until the variants exist.
	id, err := sh(lines[0] + `; printf %s "$ID"`)
	if err != nil || !strings.HasPrefix(id, "s.a.") {
		t.Fatalf("%s: %q, %v", lines[0], id, err)
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "console: ") {
			if !strings.Contains(l, "http://127.0.0.1:") {
				t.Errorf("console line %q has no address", l)
			}
			continue
		}
		for {
			o, err := sh("ID=" + id + "\n" + l)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v: %s", l, err, o)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Every file a command wrote holds the format its name says.
	files, _ := filepath.Glob(filepath.Join(work, "*.*"))
	seen := map[string]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		ext := filepath.Ext(f)
		seen[ext] = true
		isJPEG := len(b) > 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff
		isHEIC := len(b) > 12 && string(b[4:8]) == "ftyp" && (string(b[8:12]) == "heic" || string(b[8:12]) == "mif1")
		if (ext == ".jpg" && !isJPEG) || (ext == ".heic" && !isHEIC) {
			t.Errorf("%s (%d bytes) does not hold what its extension says", filepath.Base(f), len(b))
		}
	}
	if !seen[".heic"] || len(files) < 4 {
		t.Errorf("the banner's commands wrote %v; want medium.jpg, medium.heic and thumb.heic (variants are HEIC at level normal)", files)
	}
}

func TestUpBannerFollowsTheCodec(t *testing.T) {
	f := cluster.File{Master: "127.0.0.1:5", Console: "http://127.0.0.1:6/console"}
	heic := upBanner("/tmp/my run/cluster.json", f, flex.CodecHEIC)
	jpeg := upBanner("/tmp/run/cluster.json", f, flex.CodecJPEG)
	for _, want := range []string{"-o thumb.heic", "medium.heic -H 'Accept: image/heic'", "--cluster '/tmp/my run/cluster.json'", "grpcurl -plaintext 127.0.0.1:5 list", "stored as HEIC"} {
		if !strings.Contains(heic, want) {
			t.Errorf("HEIC banner lacks %q:\n%s", want, heic)
		}
	}
	if !strings.Contains(jpeg, "-o thumb.jpg") || strings.Contains(jpeg, "heic") || !strings.Contains(jpeg, "--cluster /tmp/run/cluster.json ") {
		t.Errorf("JPEG banner:\n%s", jpeg)
	}
}
