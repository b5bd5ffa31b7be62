package upload

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	willowv1 "willow/proto/willow/v1"
)

// frames splits b into 16 KiB buffers, as gRPC's HTTP/2 frames arrive.
func frames(b []byte) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		s = append(s, mem.SliceBuffer(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return s
}

// TestChunkCodecDecodesAsProto: the registered "proto" codec decodes a
// chunkMsg to the same fields protobuf-go gives, with Data aliasing the
// receive buffer, and decodes every other message as before.
func TestChunkCodecDecodesAsProto(t *testing.T) {
	c := encoding.GetCodecV2(grpcproto.Name)
	if _, ok := c.(chunkCodec); !ok {
		t.Fatalf("registered proto codec is %T, want chunkCodec", c)
	}
	big := bytes.Repeat([]byte("willow"), 200_000)
	for _, in := range []*willowv1.Chunk{
		{UploadId: "u-1", Offset: 1 << 40, Data: big, User: "ana"},
		{UploadId: "u-2"},
		{Data: []byte{0}},
		{Offset: -1, User: "bo"},
	} {
		wire, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		// An unknown field and a repeated known one (the last wins) decode
		// as protobuf-go decodes them.
		wire = protowire.AppendTag(wire, 9, protowire.BytesType)
		wire = protowire.AppendBytes(wire, []byte("unknown"))
		wire = protowire.AppendTag(wire, 2, protowire.VarintType)
		wire = protowire.AppendVarint(wire, uint64(in.Offset+7))
		want := new(willowv1.Chunk)
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatal(err)
		}
		m := new(chunkMsg)
		if err := c.Unmarshal(frames(wire), m); err != nil {
			t.Fatal(err)
		}
		if m.UploadId != want.UploadId || m.Offset != want.Offset || m.User != want.User || !bytes.Equal(m.Data, want.Data) {
			t.Fatalf("decoded %q/%d/%q/%d bytes, protobuf-go %q/%d/%q/%d bytes",
				m.UploadId, m.Offset, m.User, len(m.Data), want.UploadId, want.Offset, want.User, len(want.Data))
		}
		if len(m.Data) > 0 {
			buf := m.buf.ReadOnlyData()
			if &m.Data[0] != &buf[len(buf)-len(wire)+bytes.Index(wire, in.Data)] {
				t.Fatal("Data does not alias the receive buffer")
			}
			if cap(m.Data) != len(m.Data) {
				t.Fatal("Data has spare capacity: an append would write into the buffer")
			}
		}
		m.release()
		if m.Data != nil || m.buf != nil {
			t.Fatal("release kept the buffer")
		}
		// The plain Chunk goes through the stock codec.
		plain := new(willowv1.Chunk)
		if err := c.Unmarshal(frames(wire), plain); err != nil || !proto.Equal(plain, want) {
			t.Fatalf("plain Chunk: %v, equal %v", err, proto.Equal(plain, want))
		}
	}
	// A chunkMsg under the stock codec still decodes (it is a proto.Message).
	wire, _ := proto.Marshal(&willowv1.Chunk{UploadId: "x", Data: []byte("abc")})
	m := new(chunkMsg)
	if err := c.(chunkCodec).base.Unmarshal(frames(wire), m); err != nil || m.UploadId != "x" || string(m.Data) != "abc" {
		t.Fatalf("stock codec into chunkMsg: %v %q %q", err, m.UploadId, m.Data)
	}
}

// goodChunk is a small well-formed Chunk on the wire.
func goodChunk() []byte {
	b, _ := proto.Marshal(&willowv1.Chunk{UploadId: "u", Offset: 5, Data: []byte("abcdef"), User: "ana"})
	return b
}

// badChunks are wire messages protobuf-go refuses: truncated, a bad tag,
// invalid UTF-8 in a string field.
func badChunks() [][]byte {
	good := goodChunk()
	return [][]byte{
		good[:len(good)-1],
		good[:2],
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}),
		protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte{0xc0}),
		protowire.AppendTag(nil, 2, protowire.VarintType),
		{0x00},
	}
}

// TestChunkCodecRefusesBadInput: truncated messages and invalid UTF-8 in
// the string fields fail as protobuf-go fails them.
func TestChunkCodecRefusesBadInput(t *testing.T) {
	c := encoding.GetCodecV2(grpcproto.Name)
	bad := badChunks()
	for i, wire := range bad {
		if err := proto.Unmarshal(wire, new(willowv1.Chunk)); err == nil {
			t.Fatalf("case %d: protobuf-go accepts it; the case is wrong", i)
		}
		m := new(chunkMsg)
		if err := c.Unmarshal(frames(wire), m); err == nil {
			t.Fatalf("case %d: accepted %x", i, wire)
		}
		if m.buf != nil {
			t.Fatalf("case %d: a refused message kept its buffer", i)
		}
	}
}

// split cuts b into frame buffers of n bytes.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(len(b), n)
		s = append(s, mem.SliceBuffer(bytes.Clone(b[:k])))
		b = b[k:]
	}
	return s
}

// TestChunkCodecDecodesInPlace: a large chunk in several frames decodes to
// protobuf-go's fields with its data as segments of the frames' buffers
// (nothing gathered), whatever the frame boundaries cut (a varint, a
// string, the data), and released drops them.
func TestChunkCodecDecodesInPlace(t *testing.T) {
	c := encoding.GetCodecV2(grpcproto.Name)
	big := bytes.Repeat([]byte("willow"), 200_000)
	wire, err := proto.Marshal(&willowv1.Chunk{UploadId: "u-1", Offset: 1 << 40, Data: big, User: "anä"})
	if err != nil {
		t.Fatal(err)
	}
	wire = protowire.AppendTag(wire, 2, protowire.VarintType) // a repeated known field: the last wins
	wire = protowire.AppendVarint(wire, 7)
	want := new(willowv1.Chunk)
	if err := proto.Unmarshal(wire, want); err != nil {
		t.Fatal(err)
	}
	in := frames(wire)
	m := new(chunkMsg)
	if err := c.Unmarshal(in, m); err != nil {
		t.Fatal(err)
	}
	if m.segs == nil || m.Data != nil || m.buf != nil {
		t.Fatalf("not decoded in place: %d segments, %d bytes of Data", len(m.segs), len(m.Data))
	}
	if m.UploadId != want.UploadId || m.Offset != want.Offset || m.User != want.User || !bytes.Equal(bytes.Join(m.data(), nil), want.Data) {
		t.Fatalf("decoded %q/%d/%q, protobuf-go %q/%d/%q", m.UploadId, m.Offset, m.User, want.UploadId, want.Offset, want.User)
	}
	for _, sg := range m.segs {
		if cap(sg) != len(sg) {
			t.Fatal("a segment has spare capacity: an append would write into the buffer")
		}
		inFrame := false
		for _, b := range in {
			d := b.ReadOnlyData()
			if len(sg) > 0 && &sg[0] == &d[bytes.Index(d, sg[:min(len(sg), 64)])] && len(d) >= len(sg) {
				inFrame = true
			}
		}
		if !inFrame {
			t.Fatal("a segment does not alias a frame buffer")
		}
	}
	m.release()
	if m.segs != nil || m.ref != nil {
		t.Fatal("release kept the frames")
	}
	// Every frame size, down to one byte, decodes as protobuf-go does.
	small, _ := proto.Marshal(&willowv1.Chunk{UploadId: "up-ß", Offset: 1<<40 + 3, Data: []byte("0123456789abcdef"), User: "bo"})
	want = new(willowv1.Chunk)
	_ = proto.Unmarshal(small, want)
	for n := 1; n <= len(small); n++ {
		m := new(chunkMsg)
		if !m.parseSegs(split(small, n)) {
			t.Fatalf("frames of %d: refused", n)
		}
		if m.UploadId != want.UploadId || m.Offset != want.Offset || m.User != want.User || !bytes.Equal(bytes.Join(m.data(), nil), want.Data) {
			t.Fatalf("frames of %d: decoded %q/%d/%q/%q", n, m.UploadId, m.Offset, m.User, bytes.Join(m.data(), nil))
		}
	}
}

// TestChunkCodecInPlaceLeavesOddInputToGather: whatever the in-place
// decoder does not decode exactly (malformed input, an unknown field, a
// field number past 32 bits) it leaves to the gathering decoder.
func TestChunkCodecInPlaceLeavesOddInputToGather(t *testing.T) {
	good := goodChunk()
	odd := append(badChunks(),
		protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), good...), 9, protowire.BytesType), []byte("x")),
		protowire.AppendVarint(protowire.AppendVarint(nil, 1<<35|1<<3|uint64(protowire.VarintType)), 1),
		append(protowire.AppendTag(nil, 2, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02),
	)
	for i, wire := range odd {
		for _, n := range []int{1, 3, len(wire)} {
			if m := new(chunkMsg); m.parseSegs(split(wire, n)) {
				t.Fatalf("case %d, frames of %d: decoded in place %x", i, n, wire)
			}
		}
	}
}
