package shedding

import "math/bits"

// sipKey is a SipHash-2-4 key (two little-endian 64-bit words).
type sipKey struct{ k0, k1 uint64 }

// sum64 returns SipHash-2-4 of s followed by the 8 little-endian bytes of
// tail, without allocating. It is the keyed hash behind user priority: the
// user ID and the hour number go in, so the result is stable within an hour
// and unpredictable without the key. It equals sum64parts(s, tail's bytes)
// but takes the message a word at a time (TestSipHashSum64 checks
// it against a byte-wise SipHash).
func (k sipKey) sum64(s string, tail uint64) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	total := uint64(len(s) + 8)
	for len(s) >= 8 {
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v0, v1, v2, v3 = sipCompress(v0, v1, v2, v3, m)
		s = s[8:]
	}
	// The last 0-7 bytes of s, then tail: one word of those bytes and the
	// low bytes of tail, and tail's remaining bytes in the final word with
	// the length.
	var r uint64
	for i := len(s) - 1; i >= 0; i-- {
		r = r<<8 | uint64(s[i])
	}
	n := uint(len(s)) * 8
	v0, v1, v2, v3 = sipCompress(v0, v1, v2, v3, r|tail<<n)
	var last uint64
	if n > 0 {
		last = tail >> (64 - n)
	}
	v0, v1, v2, v3 = sipCompress(v0, v1, v2, v3, last|total<<56)
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	return v0 ^ v1 ^ v2 ^ v3
}

// sipCompress absorbs the message word m (two SipRounds).
func sipCompress(v0, v1, v2, v3, m uint64) (uint64, uint64, uint64, uint64) {
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	return v0 ^ m, v1, v2, v3
}

// sipRound is one SipRound.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
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
	return v0, v1, v2, v3
}
