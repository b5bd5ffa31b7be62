package buffer

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// On-disk record layout; see doc.go for the prose version.
const (
	recordMagic   uint32 = 0x57424631 // "WBF1" read big-endian; stored little-endian
	recordVersion uint8  = 1
	headerSize           = 36

	flagTombstone uint8 = 1 << 0

	// MaxKeyLen is the longest key Append accepts.
	MaxKeyLen = 4096
	// MaxMetaLen is the largest meta Append accepts.
	MaxMetaLen = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the fixed part of a record.
type header struct {
	flags      uint8
	keyLen     uint16
	metaLen    uint32
	blobLen    uint64
	appendedAt int64 // unix nanoseconds
	blobCRC    uint32
	headCRC    uint32
}

// errBadHeader reports a header that is not a valid record start: the scan
// stops there and the segment is truncated.
var errBadHeader = errors.New("bad record header")

// encode writes h into b[:headerSize], computing headCRC over the header's
// first 32 bytes, key and meta.
func (h *header) encode(b []byte, key string, meta []byte) {
	binary.LittleEndian.PutUint32(b[0:], recordMagic)
	b[4] = recordVersion
	b[5] = h.flags
	binary.LittleEndian.PutUint16(b[6:], h.keyLen)
	binary.LittleEndian.PutUint32(b[8:], h.metaLen)
	binary.LittleEndian.PutUint64(b[12:], h.blobLen)
	binary.LittleEndian.PutUint64(b[20:], uint64(h.appendedAt))
	binary.LittleEndian.PutUint32(b[28:], h.blobCRC)
	h.headCRC = headChecksum(b[:32], []byte(key), meta)
	binary.LittleEndian.PutUint32(b[32:], h.headCRC)
}

// decode parses the fixed header without checking headCRC (which needs key
// and meta); it rejects a wrong magic, version, flags or lengths.
func decodeHeader(b []byte) (header, error) {
	var h header
	if binary.LittleEndian.Uint32(b[0:]) != recordMagic || b[4] != recordVersion {
		return h, errBadHeader
	}
	h.flags = b[5]
	h.keyLen = binary.LittleEndian.Uint16(b[6:])
	h.metaLen = binary.LittleEndian.Uint32(b[8:])
	h.blobLen = binary.LittleEndian.Uint64(b[12:])
	h.appendedAt = int64(binary.LittleEndian.Uint64(b[20:]))
	h.blobCRC = binary.LittleEndian.Uint32(b[28:])
	h.headCRC = binary.LittleEndian.Uint32(b[32:])
	switch {
	case h.flags&^flagTombstone != 0,
		h.keyLen == 0 || h.keyLen > MaxKeyLen,
		h.metaLen > MaxMetaLen,
		h.flags&flagTombstone != 0 && (h.blobLen != 0 || h.metaLen != 0):
		return h, errBadHeader
	}
	return h, nil
}

func headChecksum(fixed, key, meta []byte) uint32 {
	c := crc32.Update(0, castagnoli, fixed)
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, meta)
}

// recordLen is the full on-disk length of a record.
func recordLen(keyLen, metaLen int, blobLen int64) int64 {
	return headerSize + int64(keyLen) + int64(metaLen) + blobLen
}
