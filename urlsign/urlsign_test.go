package urlsign_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"willow/urlsign"
)

const id = "s.a.upload-a-1.0123456789abcdef0123456789abcdef"

func ring(t *testing.T, keys ...urlsign.Key) *urlsign.Keyring {
	t.Helper()
	k, err := urlsign.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k1 := urlsign.Key{ID: "k1", Secret: strings.Repeat("a", 32)}
	k2 := urlsign.Key{ID: "k2", Secret: strings.Repeat("b", 32)}
	old := ring(t, k1)
	rotated := ring(t, k2, k1) // k2 signs, k1 still verifies
	retired := ring(t, k2)
	good := old.Sign(id, "thumb", "bob", now.Add(time.Hour))

	tamper := func(f func(*urlsign.Signature)) urlsign.Signature {
		s := good
		f(&s)
		return s
	}
	cases := []struct {
		name    string
		k       *urlsign.Keyring
		id, v   string
		sig     urlsign.Signature
		at      time.Time
		wantErr error
	}{
		{"valid", old, id, "thumb", good, now, nil},
		{"rotated keyring still verifies old key", rotated, id, "thumb", good, now, nil},
		{"new key signs after rotation", rotated, id, "thumb", rotated.Sign(id, "thumb", "bob", now.Add(time.Minute)), now, nil},
		{"retired key", retired, id, "thumb", good, now, urlsign.ErrUnknownKey},
		{"missing", old, id, "thumb", urlsign.Signature{}, now, urlsign.ErrMissing},
		{"expired", old, id, "thumb", good, now.Add(time.Hour), urlsign.ErrExpired},
		{"other variant", old, id, "raw", good, now, urlsign.ErrInvalid},
		{"other media", old, "s.a.upload-a-1.ffffffffffffffffffffffffffffffff", "thumb", good, now, urlsign.ErrInvalid},
		{"other user", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.User = "eve" }), now, urlsign.ErrInvalid},
		{"later expiry", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.Expires += 3600 }), now, urlsign.ErrInvalid},
		{"expired and forged is invalid", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.Expires = now.Unix() - 1 }), now, urlsign.ErrInvalid},
		{"key id swapped", ring(t, k1, urlsign.Key{ID: "k3", Secret: k1.Secret}), id, "thumb", tamper(func(s *urlsign.Signature) { s.KeyID = "k3" }), now, urlsign.ErrInvalid},
		{"other key same id", ring(t, urlsign.Key{ID: "k1", Secret: strings.Repeat("c", 32)}), id, "thumb", good, now, urlsign.ErrInvalid},
		{"mac flipped", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.MAC = "A" + s.MAC[1:] }), now, urlsign.ErrInvalid},
		{"mac truncated", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.MAC = s.MAC[:10] }), now, urlsign.ErrInvalid},
		{"no key id", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.KeyID = "" }), now, urlsign.ErrInvalid},
		{"bad key id", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.KeyID = "../x" }), now, urlsign.ErrInvalid},
		{"long user", old, id, "thumb", tamper(func(s *urlsign.Signature) { s.User = strings.Repeat("u", 300) }), now, urlsign.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.k.Verify(c.id, c.v, c.sig, c.at)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, c.wantErr)
			}
		})
	}
}

func TestURLRoundTrip(t *testing.T) {
	k := ring(t, urlsign.GenerateKey("dev-1"))
	exp := time.Unix(1_900_000_000, 0)
	raw := k.URL(id, "large", "a user&x=1", exp)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	gotID, v, ok := urlsign.ParsePath(u.Path)
	if !ok || gotID != id || v != "large" {
		t.Fatalf("ParsePath(%q) = %q %q %v", u.Path, gotID, v, ok)
	}
	s := urlsign.FromQuery(u.Query())
	if s.User != "a user&x=1" || s.KeyID != "dev-1" || s.Expires != exp.Unix() {
		t.Fatalf("FromQuery = %+v", s)
	}
	if err := k.Verify(gotID, v, s, exp.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if s := urlsign.FromQuery(url.Values{"u": {"bob"}}); !s.IsZero() {
		t.Fatalf("u alone gave %+v, want zero", s)
	}
	if s := urlsign.FromQuery(url.Values{"exp": {"soon"}, "kid": {"k"}, "sig": {"x"}}); s.Expires != -1 {
		t.Fatalf("bad exp gave %+v", s)
	}
}

func TestNewRefusesBadKeys(t *testing.T) {
	long := strings.Repeat("s", 32)
	for name, keys := range map[string][]urlsign.Key{
		"none":         nil,
		"empty id":     {{ID: "", Secret: long}},
		"bad id":       {{ID: "a b", Secret: long}},
		"short secret": {{ID: "k", Secret: "short"}},
		"duplicate":    {{ID: "k", Secret: long}, {ID: "k", Secret: long}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := urlsign.New(keys); !errors.Is(err, urlsign.ErrBadKey) {
				t.Fatalf("New = %v, want ErrBadKey", err)
			}
		})
	}
}
