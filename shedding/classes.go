package shedding

import (
	"fmt"
	"maps"
)

// Class is how admission treats a method. Each service declares its
// methods' classes next to its code and hands them to its node's Shedder
// (Declare), as it declares its caller classes to the node's guard
// (package auth); shedding itself names no service's methods.
type Class uint8

const (
	// Admitted, the class of every method not declared, is shed by
	// ratio, by level and by waiting for a slot.
	Admitted Class = iota
	// Deferred methods always reach their handler, which learns the
	// admission decision from WouldShed (the upload front's Begin, which
	// may spill to buffer pool 1 instead of rejecting).
	Deferred
	// Exempt methods are never shed and take no slot (the calls of an
	// upload admitted at Begin, reads of media already acknowledged,
	// health).
	Exempt
)

// String names the class.
func (c Class) String() string {
	switch c {
	case Admitted:
		return "admitted"
	case Deferred:
		return "deferred"
	case Exempt:
		return "exempt"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Classes maps full gRPC method names to their Class; a method not listed
// is Admitted.
type Classes map[string]Class

// Declare adds a service's method classes to the Shedder. Services call it
// from their constructor, before the node serves. A method declared again
// with another class, or an unknown class, is an error (wrapping
// ErrConfig) and declares nothing. Declare on a nil Shedder (a node
// without shedding) does nothing. It is safe for concurrent use with
// admission: the table is replaced, never modified in place.
func (s *Shedder) Declare(c Classes) error {
	if s == nil {
		return nil
	}
	s.classMu.Lock()
	defer s.classMu.Unlock()
	old := *s.classes.Load()
	next := maps.Clone(old)
	if next == nil {
		next = make(Classes, len(c))
	}
	for m, cl := range c {
		if cl > Exempt {
			return fmt.Errorf("%w: %s declared %v", ErrConfig, m, cl)
		}
		if prev, ok := old[m]; ok && prev != cl {
			return fmt.Errorf("%w: %s declared twice (%v, %v)", ErrConfig, m, prev, cl)
		}
		next[m] = cl
	}
	s.classes.Store(&next)
	return nil
}

// Class returns the class admission applies to method.
func (s *Shedder) Class(method string) Class { return (*s.classes.Load())[method] }
