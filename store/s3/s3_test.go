package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"willow/internal/testenv"
	"willow/store"
	"willow/store/s3"
)

func newStore(t *testing.T, part int64) *s3.Store {
	t.Helper()
	gw := testenv.StartS3(t)
	st, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: "willow-test", AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, PartSize: part})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// A second New on an existing bucket must work too.
	if _, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: "willow-test", AccessKey: gw.AccessKey, SecretKey: gw.SecretKey}); err != nil {
		t.Fatalf("New again: %v", err)
	}
	return st
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStoreVersitygw(t *testing.T) {
	st := newStore(t, s3.MinPartSize)
	big := make([]byte, 2*s3.MinPartSize+123)
	rand.Read(big)
	tests := []struct {
		name string
		key  string
		data []byte
		size int64
	}{
		{"small known size", "raw/aa", []byte("hello"), 5},
		{"small unknown size", "m/aa.json", []byte(`{"id":"x"}`), -1},
		{"multipart unknown size", "raw/big", big, -1},
		{"multipart known size", "raw/big2", big, int64(len(big))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := st.Put(ctx(t), tt.key, bytes.NewReader(tt.data), tt.size, "image/jpeg"); err != nil {
				t.Fatalf("Put: %v", err)
			}
			rc, info, err := st.Get(ctx(t), tt.key)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Fatalf("read back %d bytes (err %v), want %d", len(got), err, len(tt.data))
			}
			if info.Size != int64(len(tt.data)) || info.ContentType != "image/jpeg" {
				t.Fatalf("info = %+v", info)
			}
			if len(tt.data) > s3.MinPartSize {
				// A multipart ETag ends in -PARTS: 2*part+123 bytes in
				// parts of exactly PartSize is 3 parts.
				if !strings.HasSuffix(strings.Trim(info.ETag, `"`), "-3") {
					t.Fatalf("ETag %q: want 3 parts of %d bytes", info.ETag, s3.MinPartSize)
				}
			}
		})
	}
	t.Run("not found", func(t *testing.T) {
		if _, _, err := st.Get(ctx(t), "raw/none"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get = %v", err)
		}
		if _, err := st.Stat(ctx(t), "raw/none"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Stat = %v", err)
		}
		if err := st.Delete(ctx(t), "raw/none"); err != nil {
			t.Fatalf("Delete missing = %v", err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := st.Delete(ctx(t), "raw/aa"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Stat(ctx(t), "raw/aa"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Stat after delete = %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c, cancel := context.WithCancel(context.Background())
		cancel()
		if err := st.Put(c, "raw/late", bytes.NewReader([]byte("x")), 1, ""); err == nil {
			t.Fatal("Put with a cancelled context succeeded")
		}
	})
}

func TestPartSizeBounds(t *testing.T) {
	for _, tt := range []struct{ in, want int64 }{
		{0, s3.DefaultPartSize}, {1, s3.MinPartSize}, {20 << 20, 20 << 20}, {1 << 40, s3.MaxPartSize},
	} {
		if got := s3.PartSize(tt.in); got != tt.want {
			t.Errorf("PartSize(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestGetRangeVersitygw(t *testing.T) {
	st := newStore(t, s3.MinPartSize)
	data := make([]byte, 3*s3.MinPartSize/2)
	rand.Read(data)
	if err := st.Put(ctx(t), "raw/rng", bytes.NewReader(data), int64(len(data)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	for _, tc := range []struct{ off, n, want int64 }{
		{0, 1024, 1024}, {1 << 20, 1 << 20, 1 << 20}, {size - 10, 100, 10}, {size, 10, 0}, {size + 5, 10, 0},
	} {
		rc, info, err := st.GetRange(ctx(t), "raw/rng", tc.off, tc.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(got)) != tc.want || (tc.want > 0 && !bytes.Equal(got, data[tc.off:tc.off+tc.want])) {
			t.Fatalf("GetRange(%d, %d): %d bytes (err %v), want %d", tc.off, tc.n, len(got), err, tc.want)
		}
		if info.Size != size || info.ContentType != "video/mp4" || info.Modified.IsZero() {
			t.Fatalf("GetRange info = %+v", info)
		}
	}
	if _, _, err := st.GetRange(ctx(t), "raw/none", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRange missing = %v", err)
	}
}
