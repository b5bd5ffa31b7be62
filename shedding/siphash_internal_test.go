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
