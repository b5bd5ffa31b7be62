package redisconn

import "strings"

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, the text between the first '{' and the first '}' after it
// when that is not empty, else of the whole key; modulo Slots. It is
// Redis's own rule (CLUSTER KEYSLOT), so keys grouped by Slot may share a
// script or a transaction.
func Slot(key string) int {
	return int(crc16(tag(key)) % Slots)
}

// tag returns the part of key that Redis Cluster hashes.
func tag(key string) string {
	if t, ok := hashTag(key); ok {
		return t
	}
	return key
}

// hasTag reports whether key carries a (non-empty) hash tag.
func hasTag(key string) bool {
	_, ok := hashTag(key)
	return ok
}

func hashTag(key string) (string, bool) {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e], true
		}
	}
	return "", false
}

// OneSlot returns a key prefix under which every key maps to one slot:
// prefix itself when it already carries a hash tag, else "{prefix}".
// Services whose keys meet in scripts and transactions (the master's
// registry and flex document) put all their keys under it.
func OneSlot(prefix string) string {
	if hasTag(prefix) {
		return prefix
	}
	if prefix == "" || prefix[0] == '}' {
		return "{willow}" + prefix
	}
	return "{" + prefix + "}"
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// SameSlot returns the key suffix is appended to so that it shares key's
// cluster slot without renaming key: key+suffix when key carries a hash
// tag, else "{key}"+suffix. It reports false when no such key exists: key
// is empty, or holds a '}' but no hash tag.
func SameSlot(key, suffix string) (string, bool) {
	if hasTag(key) {
		return key + suffix, true
	}
	if key == "" || strings.IndexByte(key, '}') >= 0 {
		return "", false
	}
	return "{" + key + "}" + suffix, true
}
