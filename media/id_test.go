package media_test

import (
	"errors"
	"strings"
	"testing"

	"willow/media"
)

func TestParse(t *testing.T) {
	key := media.KeyFor("alice", "upload-1")
	tests := []struct {
		in string
		ok bool
	}{
		{"s.a.upload-a-1." + key, true},
		{"p1.b.up-2." + key, true},
		{"p2.a.n." + key, true},
		{"", false},
		{"x.a.n." + key, false},      // unknown location
		{"s.A.n." + key, false},      // upper case region
		{"s.a.n_1." + key, false},    // bad node name
		{"s.a.n." + key[:31], false}, // short key
		{"s.a.n." + strings.ToUpper(key), false},
		{"s.a.n." + key + ".extra", false},
		{"s..n." + key, false},
		{"../../etc/passwd", false},
		{strings.Repeat("s", 300), false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			id, err := media.Parse(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("Parse(%q) = %v, %v", tc.in, id, err)
			}
			if err != nil && !errors.Is(err, media.ErrBadID) {
				t.Fatalf("error %v does not wrap ErrBadID", err)
			}
			if err == nil && id.String() != tc.in {
				t.Fatalf("round trip: %q", id.String())
			}
		})
	}
}

func TestKeyForIsStable(t *testing.T) {
	if media.KeyFor("u", "id") != media.KeyFor("u", "id") {
		t.Fatal("KeyFor not deterministic")
	}
	if media.KeyFor("u1", "id") == media.KeyFor("u2", "id") {
		t.Fatal("different users share a key")
	}
	if media.KeyFor("a\x00b", "c") == media.KeyFor("a", "b\x00c") {
		t.Log("separator collision possible only with NUL in IDs")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("s.a.upload-a-1." + media.KeyFor("u", "x"))
	f.Add("p2.b.n.0123456789abcdef0123456789abcdef")
	f.Add("....")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := media.Parse(s)
		if err != nil {
			return
		}
		// Whatever parses round-trips and names only safe store keys.
		if id.String() != s {
			t.Fatalf("round trip %q -> %q", s, id.String())
		}
		if k := media.RawKey(id.Key); strings.Contains(k, "..") || strings.ContainsAny(k, "/\\\x00") && !strings.HasPrefix(k, "raw/") {
			t.Fatalf("unsafe key %q", k)
		}
	})
}
