package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Identity is one named operator identity.
type Identity struct {
	Name  string
	Roles []Role
	hash  [sha256.Size]byte
}

// Operators is a set of named operator identities, loaded from a file
// (LoadOperators) of the form
//
//	# name: {sha256: HEX SHA-256 OF THE TOKEN, roles: [read | oncall | admin]}
//	alice: {sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae, roles: [oncall]}
//	bob:   {sha256: fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9, roles: [read]}
//
// Only hashes are stored: the file reveals no token. A nil *Operators is
// an empty set. Operators is immutable once built.
type Operators struct {
	byName map[string]*Identity
}

type operatorYAML struct {
	SHA256 string `yaml:"sha256"`
	Roles  []Role `yaml:"roles"`
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._@-]{0,63}$`)

// ParseOperators parses the identities file format.
func ParseOperators(b []byte) (*Operators, error) {
	var m map[string]operatorYAML
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("auth: operators: %w", err)
	}
	ops := &Operators{byName: map[string]*Identity{}}
	seen := map[[sha256.Size]byte]string{}
	for name, o := range m {
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("auth: operators: bad name %q", name)
		}
		h, err := hex.DecodeString(o.SHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("auth: operators: %s: sha256 must be 64 hex digits", name)
		}
		if !roleOK(o.Roles) {
			return nil, fmt.Errorf("auth: operators: %s: roles must be some of read, oncall, admin", name)
		}
		op := &Identity{Name: name, Roles: slices.Clone(o.Roles)}
		copy(op.hash[:], h)
		if other, dup := seen[op.hash]; dup {
			return nil, fmt.Errorf("auth: operators: %s and %s share a token", other, name)
		}
		seen[op.hash] = name
		ops.byName[name] = op
	}
	return ops, nil
}

// LoadOperators reads an identities file (see Operators).
func LoadOperators(path string) (*Operators, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return ParseOperators(b)
}

// Len is the number of identities.
func (o *Operators) Len() int {
	if o == nil {
		return 0
	}
	return len(o.byName)
}

// Names lists the identities' names, sorted.
func (o *Operators) Names() []string {
	if o == nil {
		return nil
	}
	var n []string
	for k := range o.byName {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Lookup returns the identity whose token is tok. Every identity is
// compared in constant time.
func (o *Operators) Lookup(tok string) (Identity, bool) {
	if o == nil || tok == "" {
		return Identity{}, false
	}
	h := sha256.Sum256([]byte(tok))
	var found *Identity
	for _, op := range o.byName {
		if subtle.ConstantTimeCompare(h[:], op.hash[:]) == 1 {
			found = op
		}
	}
	if found == nil {
		return Identity{}, false
	}
	return Identity{Name: found.Name, Roles: slices.Clone(found.Roles)}, true
}

// HashToken returns the hex SHA-256 of tok, as the identities file holds it.
func HashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// OperatorLine returns one identities-file line for name with tok's hash
// and roles.
func OperatorLine(name, tok string, roles ...Role) string {
	rs := make([]string, len(roles))
	for i, r := range roles {
		rs[i] = string(r)
	}
	return fmt.Sprintf("%s: {sha256: %s, roles: [%s]}\n", name, HashToken(tok), strings.Join(rs, ", "))
}

// With returns a copy of o with one more identity: name, the token's hash
// and roles. It fails like ParseOperators on a bad name, an empty token,
// bad roles or a name or token already present.
func (o *Operators) With(name, tok string, roles ...Role) (*Operators, error) {
	if !nameRE.MatchString(name) || tok == "" || !roleOK(roles) {
		return nil, fmt.Errorf("auth: operator %q: need a name, a token and roles of read, oncall, admin", name)
	}
	out := &Operators{byName: map[string]*Identity{}}
	h := sha256.Sum256([]byte(tok))
	if o != nil {
		for k, v := range o.byName {
			if k == name || v.hash == h {
				return nil, fmt.Errorf("auth: operator %q: name or token already present", name)
			}
			out.byName[k] = v
		}
	}
	out.byName[name] = &Identity{Name: name, Roles: slices.Clone(roles), hash: h}
	return out, nil
}

// Get returns the identity called name.
func (o *Operators) Get(name string) (Identity, bool) {
	if o == nil || o.byName[name] == nil {
		return Identity{}, false
	}
	id := *o.byName[name]
	id.Roles = slices.Clone(id.Roles)
	return id, true
}

// WithHash returns a copy of o with id added (an identity from another
// set: Get). Like With, a name or token already present is an error.
func (o *Operators) WithHash(id Identity) (*Operators, error) {
	out := &Operators{byName: map[string]*Identity{}}
	if o != nil {
		for k, v := range o.byName {
			if k == id.Name || v.hash == id.hash {
				return nil, fmt.Errorf("auth: operator %q: name or token already present", id.Name)
			}
			out.byName[k] = v
		}
	}
	c := id
	out.byName[id.Name] = &c
	return out, nil
}
