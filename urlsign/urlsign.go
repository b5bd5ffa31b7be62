// Package urlsign signs and verifies media download URLs.
//
// A signed URL is the edge path /m/{id}/{variant} with the query
//
//	u=USER&exp=UNIX&kid=KEY_ID&sig=MAC
//
// MAC is HMAC-SHA256, under the key named KEY_ID, of the media ID, the
// variant, the user the URL was signed for, the expiry and the key ID
// (see Keyring.Sign), base64url without padding. USER may be empty.
//
// Keys rotate without a cold cache: a Keyring holds several keys at once,
// the first signs and every one verifies, and nothing of the signature is
// part of the edge's cache key. To rotate, add the new key after the old one
// on every verifier (the edges), then move it first on the signers, then
// remove the old key once every URL it signed has expired.
package urlsign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits on what a key and a signature may hold.
const (
	// MinSecretBytes is the shortest key secret New accepts.
	MinSecretBytes = 16
	// MaxKeyIDLen bounds a key ID ([A-Za-z0-9_-]).
	MaxKeyIDLen = 32
	// MaxUserLen bounds the user a URL is signed for.
	MaxUserLen = 256
	// macLen is the length of a MAC in its text form.
	macLen = 43 // base64url(32 bytes), no padding
)

// Query parameters of a signed URL.
const (
	ParamUser    = "u"
	ParamExpires = "exp"
	ParamKeyID   = "kid"
	ParamMAC     = "sig"
)

// Errors returned (wrapped) by New and Verify.
var (
	// ErrMissing means the request carries no signature at all.
	ErrMissing = errors.New("url signature missing")
	// ErrExpired means the signature was valid until its expiry, which has
	// passed.
	ErrExpired = errors.New("url signature expired")
	// ErrUnknownKey means the signature names a key this keyring does not
	// hold (retired, or never issued).
	ErrUnknownKey = errors.New("url signature key unknown")
	// ErrInvalid means the signature is malformed or does not match the
	// URL (tampered, or signed for another media, variant or user).
	ErrInvalid = errors.New("url signature invalid")
	// ErrBadKey means a key given to New is unusable.
	ErrBadKey = errors.New("bad url signing key")
)

// Key is one signing key.
type Key struct {
	// ID names the key in signatures: 1 to MaxKeyIDLen of [A-Za-z0-9_-].
	ID string `json:"id" yaml:"id"`
	// Secret is the HMAC secret, at least MinSecretBytes.
	Secret string `json:"secret" yaml:"secret"`
}

// Signature is the signed part of a URL.
type Signature struct {
	KeyID   string
	Expires int64 // unix seconds
	User    string
	MAC     string
}

// IsZero reports whether s carries nothing (an unsigned request).
func (s Signature) IsZero() bool { return s == Signature{} }

// Expiry returns s.Expires as a time.
func (s Signature) Expiry() time.Time { return time.Unix(s.Expires, 0) }

// Encode returns the URL query of s (without "?").
func (s Signature) Encode() string {
	var b strings.Builder
	if s.User != "" {
		b.WriteString(ParamUser + "=" + url.QueryEscape(s.User) + "&")
	}
	b.WriteString(ParamExpires + "=" + strconv.FormatInt(s.Expires, 10))
	b.WriteString("&" + ParamKeyID + "=" + url.QueryEscape(s.KeyID))
	b.WriteString("&" + ParamMAC + "=" + s.MAC)
	return b.String()
}

// FromQuery reads a signature from a URL query. A query without any of
// exp, kid and sig gives the zero Signature; a malformed expiry gives
// Expires -1, which Verify refuses.
func FromQuery(q url.Values) Signature {
	s := Signature{KeyID: q.Get(ParamKeyID), MAC: q.Get(ParamMAC), User: q.Get(ParamUser)}
	if e := q.Get(ParamExpires); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			n = -1
		}
		s.Expires = n
	}
	if s.KeyID == "" && s.MAC == "" && s.Expires == 0 {
		s.User = "" // u alone is not a signature
	}
	return s
}

// Path is the edge path of one variant of a media item.
func Path(mediaID, variant string) string { return "/m/" + mediaID + "/" + variant }

// ParsePath splits an edge path /m/{id}/{variant}; ok is false for any
// other shape.
func ParsePath(p string) (mediaID, variant string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/m/")
	if !ok {
		return "", "", false
	}
	id, v, ok := strings.Cut(rest, "/")
	if !ok || id == "" || v == "" || strings.Contains(v, "/") {
		return "", "", false
	}
	return id, v, true
}

// Keyring holds the keys of one deployment: the first signs, all verify.
// It is immutable and safe for concurrent use.
type Keyring struct {
	signing string
	keys    map[string][]byte
}

// New returns a keyring of keys; keys[0] signs. Errors wrap ErrBadKey: no
// keys, a bad or duplicate ID, a short secret.
func New(keys []Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrBadKey)
	}
	k := &Keyring{signing: keys[0].ID, keys: make(map[string][]byte, len(keys))}
	for _, key := range keys {
		if !validKeyID(key.ID) {
			return nil, fmt.Errorf("%w: key id %q: want 1 to %d of [A-Za-z0-9_-]", ErrBadKey, key.ID, MaxKeyIDLen)
		}
		if len(key.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("%w: key %s: secret shorter than %d bytes", ErrBadKey, key.ID, MinSecretBytes)
		}
		if _, dup := k.keys[key.ID]; dup {
			return nil, fmt.Errorf("%w: key id %s twice", ErrBadKey, key.ID)
		}
		k.keys[key.ID] = []byte(key.Secret)
	}
	return k, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLen {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// SigningKeyID returns the ID of the key that signs.
func (k *Keyring) SigningKeyID() string { return k.signing }

// KeyIDs returns the IDs of every key that verifies, signing key first.
func (k *Keyring) KeyIDs() []string {
	ids := []string{k.signing}
	for id := range k.keys {
		if id != k.signing {
			ids = append(ids, id)
		}
	}
	return ids
}

// Sign signs one variant of a media item for user (may be empty) until exp
// (second precision) with the signing key.
func (k *Keyring) Sign(mediaID, variant, user string, exp time.Time) Signature {
	s := Signature{KeyID: k.signing, Expires: exp.Unix(), User: user}
	s.MAC = mac(k.keys[k.signing], mediaID, variant, s)
	return s
}

// URL returns the signed edge path and query of one variant:
// /m/{id}/{variant}?u=…&exp=…&kid=…&sig=….
func (k *Keyring) URL(mediaID, variant, user string, exp time.Time) string {
	return Path(mediaID, variant) + "?" + k.Sign(mediaID, variant, user, exp).Encode()
}

// Verify checks s for one variant of a media item at now. Errors wrap
// ErrMissing (s is zero), ErrUnknownKey, ErrInvalid (malformed, or the MAC
// does not match: the ID, variant, user, expiry or key was changed) or
// ErrExpired. The MAC is checked before the expiry, so an expired answer
// is never given for a forged signature.
func (k *Keyring) Verify(mediaID, variant string, s Signature, now time.Time) error {
	if s.IsZero() {
		return ErrMissing
	}
	if s.KeyID == "" || s.MAC == "" || s.Expires <= 0 {
		return fmt.Errorf("%w: want %s, %s and %s", ErrInvalid, ParamExpires, ParamKeyID, ParamMAC)
	}
	if len(s.User) > MaxUserLen || len(s.MAC) != macLen {
		return fmt.Errorf("%w: malformed", ErrInvalid)
	}
	secret, ok := k.keys[s.KeyID]
	if !ok {
		if !validKeyID(s.KeyID) {
			return fmt.Errorf("%w: malformed key id", ErrInvalid)
		}
		return fmt.Errorf("%w: %s", ErrUnknownKey, s.KeyID)
	}
	if !hmac.Equal([]byte(s.MAC), []byte(mac(secret, mediaID, variant, s))) {
		return fmt.Errorf("%w: signature does not match the url", ErrInvalid)
	}
	if now.Unix() >= s.Expires {
		return fmt.Errorf("%w at %s", ErrExpired, s.Expiry().UTC().Format(time.RFC3339))
	}
	return nil
}

func mac(secret []byte, mediaID, variant string, s Signature) string {
	h := hmac.New(sha256.New, secret)
	// Every field is length-prefixed, so no two field lists give the same
	// input.
	for _, f := range []string{"willow-url-v1", mediaID, variant, s.User, strconv.FormatInt(s.Expires, 10), s.KeyID} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f + "\n"))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// GenerateKey returns a key named id with a random 32-byte secret (64 hex
// digits), as `willow up` writes into cluster.json.
func GenerateKey(id string) Key {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return Key{ID: id, Secret: hex.EncodeToString(b)}
}
