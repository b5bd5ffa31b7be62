package buffer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"willow/buffer"
)

const (
	crashDirEnv   = "WILLOW_BUFFER_CRASH_DIR"
	crashRoundEnv = "WILLOW_BUFFER_CRASH_ROUND"
)

// crashBlob is the content the helper appends under key; the parent
// recomputes it to check what it reads back.
func crashBlob(round, i int) (string, []byte) {
	return fmt.Sprintf("raw/%d-%06d", round, i), blob(uint64(round*1_000_000+i), 1+(i*7919)%(300<<10))
}

func crashOptions(round int) buffer.Options {
	opts := buffer.Options{MaxSegmentBytes: 1 << 20, Logger: quiet}
	if round%2 == 1 {
		opts.Sync = buffer.SyncNone // survives kill -9 too: the kernel keeps the pages
	}
	return opts
}

// TestHelperAppender is the child process of TestKill9: it appends blobs in
// a loop, deleting and compacting now and then, and prints "A key" after
// each Append returns, "d key" before each Delete and "D key" after it
// returns, until killed.
func TestHelperAppender(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKill9; runs only when re-executed by it")
	}
	var round int
	fmt.Sscan(os.Getenv(crashRoundEnv), &round)
	p, err := buffer.Open(dir, crashOptions(round))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		key, data := crashBlob(round, i)
		if err := p.Append(ctx, key, []byte(key), strings.NewReader(string(data)), int64(len(data))); err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stdout, "A %s\n", key)
		if i%4 == 3 { // keep one in four, so Compact has sparse segments to rewrite
			for j := i - 2; j <= i; j++ {
				old, _ := crashBlob(round, j)
				fmt.Fprintf(os.Stdout, "d %s\n", old) // intent: the delete may land unacknowledged
				if err := p.Delete(old); err != nil {
					fmt.Fprintln(os.Stderr, "delete:", err)
					os.Exit(3)
				}
				fmt.Fprintf(os.Stdout, "D %s\n", old)
			}
		}
		if i%12 == 11 {
			if err := p.Compact(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "compact:", err)
				os.Exit(3)
			}
		}
	}
}

// TestKill9 re-executes the test binary as TestHelperAppender, SIGKILLs it
// at a random moment, and checks that every acknowledged append reads back
// byte-identical, every acknowledged delete stays deleted, and nothing in
// the pool is partial. Rounds share one directory, so each also recovers
// from the previous crashes.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	live := map[string]bool{} // acknowledged state across rounds
	deadline := time.Now().Add(15 * time.Second)
	for round := 0; round < 6 && time.Now().Before(deadline); round++ {
		acked := runAndKill(t, dir, round, time.Duration(rng.IntN(300))*time.Millisecond)
		for _, l := range acked {
			switch op, key, _ := strings.Cut(l, " "); op {
			case "A":
				live[key] = true
			case "D":
				live[key] = false
			case "d": // delete begun: until acknowledged, either outcome is right
				delete(live, key)
			}
		}
		p, err := buffer.Open(dir, crashOptions(round))
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		for key, isLive := range live {
			got, _, err := read(p, key)
			switch {
			case !isLive && !errors.Is(err, buffer.ErrNotFound):
				t.Errorf("round %d: acknowledged delete of %s undone: %v", round, key, err)
			case isLive && err != nil:
				t.Errorf("round %d: acknowledged %s lost: %v", round, key, err)
			case isLive && !bytesEqualBlob(key, got):
				t.Errorf("round %d: acknowledged %s reads back different bytes", round, key)
			}
		}
		// Whatever else survived (appended but killed before the ack) is
		// whole, never partial.
		for _, e := range p.List() {
			got, _, err := read(p, e.Key)
			if err != nil || !bytesEqualBlob(e.Key, got) || string(e.Meta) != e.Key {
				t.Errorf("round %d: listed %s not intact: %v", round, e.Key, err)
			}
		}
		t.Logf("round %d: %d acks, %d live after recovery, %+v", round, len(acked), len(p.List()), p.Stats())
		p.Close()
	}
}

func bytesEqualBlob(key string, got []byte) bool {
	var round, i int
	if _, err := fmt.Sscanf(key, "raw/%d-%d", &round, &i); err != nil {
		return false
	}
	_, want := crashBlob(round, i)
	return string(got) == string(want)
}

// runAndKill starts the helper, waits for its first ack plus delay, kills
// it with SIGKILL and returns the complete A/d/D lines it printed, in order.
func runAndKill(t *testing.T, dir string, round int, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s=%d", crashRoundEnv, round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked []string
		first = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil { // EOF after the kill; a partial last line is not an ack
				return
			}
			l = strings.TrimSuffix(l, "\n")
			if op, _, _ := strings.Cut(l, " "); op == "A" || op == "d" || op == "D" {
				mu.Lock()
				if acked = append(acked, l); len(acked) == 1 {
					close(first)
				}
				mu.Unlock()
			}
		}
	}()
	select {
	case <-first:
	case <-done:
		cmd.Wait()
		t.Fatalf("round %d: helper exited before its first ack", round)
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("round %d: helper printed no ack in 10s", round)
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("round %d: helper ended with %v, want killed", round, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return acked
}
