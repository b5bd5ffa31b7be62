package upload

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	willowv1 "willow/proto/willow/v1"
)

// The Chunks receive path decodes each chunk without copying its data out
// of gRPC's receive buffer.
//
// gRPC's proto codec copies every message twice: its frames into one
// pooled buffer, then protobuf-go copies the bytes field out of that
// buffer into a fresh allocation (protobuf-go never aliases its input) and
// the pooled buffer goes back to the pool. For a 1 MiB chunk the second
// copy and its allocation were about a tenth of the front's CPU.
//
// chunkCodec replaces the registered "proto" codec with one that decodes
// exactly one type differently: *chunkMsg, which only this package's
// Chunks reader passes to RecvMsg. For it, the frames are gathered into a
// pooled buffer as before (no copy when the message arrived in one
// buffer; chunkPool), the four Chunk fields are parsed by hand, and Data aliases the
// buffer, which the chunkMsg keeps a reference to. The handler releases
// the chunk after its data is written and hashed; only then can the
// buffer be reused, so a later receive never overwrites data still in
// use. A chunk dropped without release just leaves its buffer to the
// garbage collector. Every other message, and a chunkMsg under another
// codec (it is a proto.Message through its embedded Chunk), decodes as
// before.
type chunkCodec struct{ base encoding.CodecV2 }

func init() {
	encoding.RegisterCodecV2(chunkCodec{base: encoding.GetCodecV2(proto.Name)})
}

func (c chunkCodec) Name() string { return proto.Name }

func (c chunkCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c chunkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*chunkMsg)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	// One reference of our own: gRPC frees its reference to data when
	// Unmarshal returns.
	buf := data.MaterializeToBuffer(chunkPool)
	if err := m.parse(buf.ReadOnlyData()); err != nil {
		buf.Free()
		return err
	}
	m.buf = buf
	return nil
}

// chunkPool holds the buffers chunks are gathered into. Unlike gRPC's
// default pool it does not clear a buffer it hands out (for a 1 MiB chunk
// that clear cost as much as the copy): MaterializeToBuffer overwrites
// every byte of the length it asks for, so nothing of an earlier chunk can
// show through.
var chunkPool mem.BufferPool = &noZeroPool{}

type noZeroPool struct{ p sync.Pool }

func (z *noZeroPool) Get(size int) *[]byte {
	if b, ok := z.p.Get().(*[]byte); ok {
		if cap(*b) >= size {
			*b = (*b)[:size]
			return b
		}
		z.p.Put(b)
	}
	b := make([]byte, size, (size+4095)&^4095)
	return &b
}

func (z *noZeroPool) Put(b *[]byte) { z.p.Put(b) }

// chunkMsg is a received Chunk whose Data may alias a pooled receive
// buffer (buf); release it once Data is no longer used.
type chunkMsg struct {
	willowv1.Chunk
	buf mem.Buffer
}

// release returns the receive buffer to gRPC's pool and forgets Data.
func (m *chunkMsg) release() {
	if m == nil {
		return
	}
	m.Data = nil
	if m.buf != nil {
		m.buf.Free()
		m.buf = nil
	}
}

// parse decodes a Chunk (upload.proto: upload_id 1, offset 2, data 3,
// user 4) as protobuf-go would, except that Data aliases b and unknown
// fields are dropped. Strings must be UTF-8, as proto3 requires.
func (m *chunkMsg) parse(b []byte) error {
	m.UploadId, m.Offset, m.Data, m.User = "", 0, nil, ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("chunk: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 3 || num == 4) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("chunk field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case 3:
				m.Data = v[:len(v):len(v)] // an append never writes into the buffer
			case 1, 4:
				if !utf8.Valid(v) {
					return fmt.Errorf("chunk field %d: string field contains invalid UTF-8", num)
				}
				if num == 1 {
					m.UploadId = string(v)
				} else {
					m.User = string(v)
				}
			}
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("chunk field 2: %w", protowire.ParseError(n))
			}
			b = b[n:]
			m.Offset = int64(v)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("chunk field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}
