package upload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzChunks applies a random sequence of chunk writes (offsets, lengths,
// duplicates, conflicting bytes, syncs and reopenings as after a crash) to
// a staging file and checks it against a model: the staged bytes always
// equal the accepted ones, a chunk contradicting received bytes is
// refused, a reopen keeps exactly the durable prefix, the running hash
// matches, and nothing panics.
// Each op is 6 bytes: kind, offset (2), length (2), flip.
func FuzzChunks(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 100, 0})
	f.Add([]byte{0, 0, 0, 0, 100, 0, 0, 0, 50, 0, 100, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 150, 1, 0, 0})
	f.Add([]byte{0, 0, 200, 0, 10, 0})                  // gap
	f.Add([]byte{0, 0, 0, 0, 10, 0, 0, 0, 5, 0, 10, 7}) // conflicting duplicate
	f.Add([]byte{0, 0, 0, 3, 255, 0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 3, 0, 3, 255, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const size = 2000
		content := make([]byte, size)
		for i := range content {
			content[i] = byte(i*7 + i/13)
		}
		dir := filepath.Join(t.TempDir(), "u")
		st, err := createStaged(dir, stageMeta{UploadID: "f", User: "u", Size: size, SHA256: fmt.Sprintf("%x", sha256.Sum256(content))})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { st.Close() }()
		var durable int64
		var model []byte // the accepted bytes
		for len(ops) >= 6 {
			op, off, n, flip := ops[0]%4, int64(binary.BigEndian.Uint16(ops[1:3]))%(size+100), int(binary.BigEndian.Uint16(ops[3:5]))%(MaxChunkBytes/256), ops[5]
			ops = ops[6:]
			switch op {
			case 0, 3: // a chunk, possibly with flipped bytes
				end := min(off+int64(n), size+50)
				var data []byte
				if off < size {
					data = append(data, content[off:min(end, size)]...)
				}
				for int64(len(data)) < end-off {
					data = append(data, 'x')
				}
				if flip != 0 && len(data) > 0 {
					data[int(flip)%len(data)] ^= flip
				}
				written, _ := st.Offsets()
				err := st.Write(off, data, 0)
				overlap := max(0, min(written, end)-off)
				conflict := off <= written && !bytes.Equal(model[min(off, written):min(off, written)+overlap], data[:overlap])
				switch {
				case end > size || off < 0:
					if !errors.Is(err, errRange) {
						t.Fatalf("write [%d,%d) past size: %v", off, end, err)
					}
				case off > written:
					if !errors.Is(err, errGap) {
						t.Fatalf("write at %d beyond %d: %v", off, written, err)
					}
				case conflict:
					if !errors.Is(err, errMismatch) {
						t.Fatalf("conflicting chunk at %d: %v", off, err)
					}
				case err != nil:
					t.Fatalf("write: %v", err)
				default:
					model = append(model, data[overlap:]...)
				}
			case 1:
				d, err := st.Sync()
				if err != nil {
					t.Fatal(err)
				}
				durable = d
			case 2: // crash and reopen: only the durable prefix survives
				st.Close()
				if st, err = openStaged(dir); err != nil {
					t.Fatal(err)
				}
				if w, d := st.Offsets(); w != durable || d != durable {
					t.Fatalf("reopened at %d/%d, durable was %d", w, d, durable)
				}
				model = model[:durable]
			}
			written, _ := st.Offsets()
			got, err := os.ReadFile(filepath.Join(dir, fileData))
			if err != nil {
				t.Fatal(err)
			}
			if written != int64(len(model)) || int64(len(got)) < written || !bytes.Equal(got[:written], model) {
				t.Fatalf("staged bytes differ from the accepted ones in [0, %d)", written)
			}
			if want := fmt.Sprintf("%x", sha256.Sum256(model)); st.Sum() != want {
				t.Fatalf("hash of [0, %d) wrong", written)
			}
		}
	})
}
