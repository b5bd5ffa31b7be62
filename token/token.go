// Package token signs and verifies Willow upload tokens: an HMAC-SHA256
// signature over (user, business, expiry), so an upload front can check
// that a Begin comes from the user and business it names, before the
// token's expiry, without a lookup.
//
// The text form is "v1.PAYLOAD.MAC", PAYLOAD and MAC base64url without
// padding; PAYLOAD is the JSON {"u": user, "b": business, "e": expiry
// unix seconds}. Verify compares MACs in constant time. Anyone holding the
// secret can mint tokens, so it is a deployment secret (cluster.json
// carries a development one).
package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors returned (wrapped) by Verify and Sign.
var (
	// ErrInvalid means the token is malformed or its signature is wrong
	// (forged, or signed with another secret).
	ErrInvalid = errors.New("invalid upload token")
	// ErrExpired means the token was valid but its expiry has passed.
	ErrExpired = errors.New("upload token expired")
	// ErrNoSecret means an empty secret was given.
	ErrNoSecret = errors.New("upload token secret is empty")
)

const version = "v1"

// Claims are what a token asserts.
type Claims struct {
	User     string
	Business string
	Expiry   time.Time
}

type payload struct {
	U string `json:"u"`
	B string `json:"b"`
	E int64  `json:"e"`
}

var b64 = base64.RawURLEncoding

// Sign returns a token for user and business valid until expiry (second
// precision). It fails only on an empty secret or user.
func Sign(secret []byte, user, business string, expiry time.Time) (string, error) {
	if len(secret) == 0 {
		return "", ErrNoSecret
	}
	if user == "" {
		return "", errors.New("token: empty user")
	}
	p, err := json.Marshal(payload{U: user, B: business, E: expiry.Unix()})
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	body := version + "." + b64.EncodeToString(p)
	return body + "." + b64.EncodeToString(mac(secret, body)), nil
}

// Verify checks tok's signature with secret and its expiry against now.
// Errors wrap ErrInvalid (malformed, forged) or ErrExpired; on ErrExpired
// the returned Claims are still filled in.
func Verify(secret []byte, tok string, now time.Time) (Claims, error) {
	if len(secret) == 0 {
		return Claims{}, ErrNoSecret
	}
	if len(tok) > 4096 {
		return Claims{}, fmt.Errorf("%w: too long", ErrInvalid)
	}
	i := strings.LastIndexByte(tok, '.')
	if i < 0 || !strings.HasPrefix(tok, version+".") {
		return Claims{}, fmt.Errorf("%w: malformed", ErrInvalid)
	}
	body, sig := tok[:i], tok[i+1:]
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(secret, body)) {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	raw, err := b64.DecodeString(strings.TrimPrefix(body, version+"."))
	if err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
	}
	var p payload
	if err := json.Unmarshal(raw, &p); err != nil || p.U == "" {
		return Claims{}, fmt.Errorf("%w: payload", ErrInvalid)
	}
	c := Claims{User: p.U, Business: p.B, Expiry: time.Unix(p.E, 0)}
	if !now.Before(c.Expiry) {
		return c, fmt.Errorf("%w at %s", ErrExpired, c.Expiry.UTC().Format(time.RFC3339))
	}
	return c, nil
}

func mac(secret []byte, body string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(body))
	return h.Sum(nil)
}
