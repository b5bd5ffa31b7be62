package shedding

import (
	"encoding/binary"
	"math/bits"
)

// sipKey is a SipHash-2-4 key (two little-endian 64-bit words).
type sipKey struct{ k0, k1 uint64 }

// sum64 returns SipHash-2-4 of s followed by the 8 little-endian bytes of
// tail, without allocating. It is the keyed hash behind user priority: the
// user ID and the hour number go in, so the result is stable within an hour
// and unpredictable without the key.
func (k sipKey) sum64(s string, tail uint64) uint64 {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], tail)
	return k.sum64parts(s, buf[:])
}

// sum64parts hashes the concatenation a || b.
func (k sipKey) sum64parts(a string, b []byte) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	total := len(a) + len(b)

	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
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
