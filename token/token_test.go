package token_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"willow/token"
)

func TestVerify(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_800_000_000, 0)
	good, err := token.Sign(secret, "alice", "moments", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, _ := token.Sign(secret, "alice", "moments", now.Add(-time.Second))
	other, _ := token.Sign([]byte("other"), "alice", "moments", now.Add(time.Hour))
	parts := strings.Split(good, ".")
	// A payload swapped in from another token keeps the old MAC: forged.
	bob, _ := token.Sign(secret, "bob", "moments", now.Add(time.Hour))
	swapped := parts[0] + "." + strings.Split(bob, ".")[1] + "." + parts[2]

	tests := []struct {
		name string
		tok  string
		want error
	}{
		{"good", good, nil},
		{"expired", expired, token.ErrExpired},
		{"other secret", other, token.ErrInvalid},
		{"swapped payload", swapped, token.ErrInvalid},
		{"empty", "", token.ErrInvalid},
		{"garbage", "v1.!!!.???", token.ErrInvalid},
		{"truncated mac", good[:len(good)-3], token.ErrInvalid},
		{"no version", strings.TrimPrefix(good, "v1."), token.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := token.Verify(secret, tt.tok, now)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if tt.want == nil && (c.User != "alice" || c.Business != "moments" || !c.Expiry.Equal(now.Add(time.Hour))) {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

func TestSignNeedsSecret(t *testing.T) {
	if _, err := token.Sign(nil, "u", "b", time.Now()); !errors.Is(err, token.ErrNoSecret) {
		t.Fatalf("err = %v", err)
	}
}
