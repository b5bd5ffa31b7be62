package upload

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
)

// FuzzChunkDecodeInPlace: for any bytes cut into frames of any size, the
// in-place decoder (parseSegs) either leaves the message to the gathering
// decoder or decodes exactly what the gathering decoder (parse) and
// protobuf-go decode; it never panics, and its segments never have spare
// capacity (an append would write into gRPC's buffers).
func FuzzChunkDecodeInPlace(f *testing.F) {
	good, _ := proto.Marshal(&willowv1.Chunk{UploadId: "u-1", Offset: 1 << 40, Data: bytes.Repeat([]byte("ab"), 300), User: "anä"})
	f.Add(good, uint16(7))
	f.Add(good, uint16(1))
	f.Add(protowire.AppendVarint(protowire.AppendTag(good, 2, protowire.VarintType), 9), uint16(64))
	f.Add(append(protowire.AppendTag(nil, 2, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), uint16(3))
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte{0xc0}), uint16(2))
	f.Fuzz(func(t *testing.T, wire []byte, size uint16) {
		n := int(size%512) + 1
		m := new(chunkMsg)
		if !m.parseSegs(split(wire, n)) {
			return
		}
		for _, sg := range m.segs {
			if cap(sg) != len(sg) {
				t.Fatal("a segment has spare capacity")
			}
		}
		g := new(chunkMsg)
		if err := g.parse(wire); err != nil {
			t.Fatalf("decoded in place, refused by parse: %v (%x)", err, wire)
		}
		want := new(willowv1.Chunk)
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatalf("decoded in place, refused by protobuf-go: %v (%x)", err, wire)
		}
		data := bytes.Join(m.data(), nil)
		for _, o := range []*willowv1.Chunk{&g.Chunk, want} {
			if m.UploadId != o.UploadId || m.Offset != o.Offset || m.User != o.User || !bytes.Equal(data, o.Data) {
				t.Fatalf("in place %q/%d/%q/%d bytes, other decoder %q/%d/%q/%d bytes (%x)",
					m.UploadId, m.Offset, m.User, len(data), o.UploadId, o.Offset, o.User, len(o.Data), wire)
			}
		}
	})
}
