package shedding

import (
	"encoding/binary"
	"testing"
)

// TestSipHashVectors checks the reference vectors of the SipHash paper
// (key 00..0f, message 00..len-1).
func TestSipHashVectors(t *testing.T) {
	var kb [16]byte
	for i := range kb {
		kb[i] = byte(i)
	}
	k := sipKey{binary.LittleEndian.Uint64(kb[:8]), binary.LittleEndian.Uint64(kb[8:])}
	msg := make([]byte, 64)
	for i := range msg {
		msg[i] = byte(i)
	}
	tests := []struct {
		n    int
		want uint64
	}{
		{0, 0x726fdb47dd0e0e31},
		{1, 0x74f839c593dc67fd},
		{15, 0xa129ca6149be45e5},
	}
	for _, tt := range tests {
		// Split the message between the string and byte parts at every
		// position: the result must not depend on the split.
		for cut := 0; cut <= tt.n; cut++ {
			if got := k.sum64parts(string(msg[:cut]), msg[cut:tt.n]); got != tt.want {
				t.Errorf("len %d cut %d: got %#x, want %#x", tt.n, cut, got, tt.want)
			}
		}
	}
}

// TestSipHashSum64 checks that sum64, which reads the string a word at a
// time, hashes exactly what sum64parts does for the string followed by
// the tail's little-endian bytes, at every string length around the word
// boundaries.
func TestSipHashSum64(t *testing.T) {
	k := sipKey{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	msg := make([]byte, 40)
	for i := range msg {
		msg[i] = byte(3*i + 1)
	}
	for _, tail := range []uint64{0, 1, 494_617, 0x8000000000000001, ^uint64(0)} {
		var tb [8]byte
		binary.LittleEndian.PutUint64(tb[:], tail)
		for n := 0; n <= len(msg); n++ {
			s := string(msg[:n])
			if got, want := k.sum64(s, tail), k.sum64parts(s, tb[:]); got != want {
				t.Errorf("len %d tail %#x: sum64 %#x, sum64parts %#x", n, tail, got, want)
			}
		}
	}
}

// sum64parts is SipHash-2-4 of the concatenation a || b, streamed a byte
// at a time: the reference sum64 is checked against.
func (k sipKey) sum64parts(a string, b []byte) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	total := len(a) + len(b)

	round := func() { v0, v1, v2, v3 = sipRound(v0, v1, v2, v3) } // pinned by TestSipHashVectors
	compress := func(m uint64) {
		v3 ^= m
		round()
		round()
		v0 ^= m
	}

	// Stream the bytes of a then b through an 8-byte word.
	var w uint64
	n := 0
	for len(a) >= 8 && n == 0 {
		compress(uint64(a[0]) | uint64(a[1])<<8 | uint64(a[2])<<16 | uint64(a[3])<<24 |
			uint64(a[4])<<32 | uint64(a[5])<<40 | uint64(a[6])<<48 | uint64(a[7])<<56)
		a = a[8:]
	}
	for i := 0; i < len(a); i++ {
		w |= uint64(a[i]) << (8 * n)
		n++
		if n == 8 {
			compress(w)
			w, n = 0, 0
		}
	}
	for _, c := range b {
		w |= uint64(c) << (8 * n)
		n++
		if n == 8 {
			compress(w)
			w, n = 0, 0
		}
	}
	w |= uint64(total&0xff) << 56
	compress(w)

	v2 ^= 0xff
	round()
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}
