package compress

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"willow/flex"
)

// The codecs' C buffers go back to the OS when a task ends: after photos
// decoded and encoded on two goroutines (two OS threads calling into
// libjpeg-turbo), the C allocator holds neither blocks in use nor free
// space in its arenas beyond a few MiB. Without the fixed mmap threshold
// (tuneMalloc) it kept tens of MiB free in its arenas here, and a compress
// worker's RSS climbed through the soak.
func TestCodecBuffersGivenBack(t *testing.T) {
	if !tuneMalloc(os.Getenv) {
		t.Fatal("tuneMalloc: mallopt refused the mmap threshold")
	}
	var datas [][]byte
	for _, name := range []string{"Kleiber_by_Lukas_Baubkus.jpg", "picosdeeuropa_by_Aitzol_Berasategi.jpg",
		"life_by_Aitzol_Berasategi.jpg", "Dragonfly_by_Bolly.jpg"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "shared", "testdata", "photos", name))
		if err != nil {
			t.Fatal(err)
		}
		datas = append(datas, b)
	}
	ch := make(chan []byte)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ch {
				if _, err := Images(context.Background(), d, ImageOptions{Codec: flex.CodecJPEG, Quality: 85}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for _, d := range datas {
		ch <- d
	}
	close(ch)
	wg.Wait()
	inUse, free := mallocBytes()
	t.Logf("C allocator after %d photos: %.1f MiB in use, %.1f MiB free in its arenas", len(datas), inUse/(1<<20), free/(1<<20))
	if inUse > 8<<20 || free > 8<<20 {
		t.Errorf("C allocator holds %.1f MiB in use and %.1f MiB free after the tasks ended, want both under 8 MiB", inUse/(1<<20), free/(1<<20))
	}
}
