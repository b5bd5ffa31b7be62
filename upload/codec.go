package upload

import (
	"bytes"
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
// Chunks reader passes to RecvMsg. For it, a large chunk that came in
// several frames is decoded in place: its data stays in the frames'
// buffers, as segments the staging file gets in one vectored write and the
// hash reads one after another (parseSegs), so no byte is gathered.
// Anything else has its frames gathered into a pooled buffer (no copy when
// the message arrived in one buffer; chunkPool), the four Chunk fields
// parsed by hand, and Data aliasing the buffer. Either way the chunkMsg
// keeps a reference to the buffers. The handler releases
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
	// A large chunk in several frames is decoded in place: its data is
	// the segments of the frames' buffers (no gather), and the chunkMsg
	// takes a reference of its own to them (gRPC frees its reference to
	// data when Unmarshal returns). Anything unusual in it (an unknown
	// field, a malformed one) takes the gather path below, which decodes
	// or refuses it exactly.
	if len(data) > 1 && len(data) <= maxChunkSegs && data.Len() >= segmentedChunkBytes && m.parseSegs(data) {
		data.Ref()
		m.ref = data
		return nil
	}
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

// chunkMsg is a received Chunk whose data aliases pooled receive
// buffers: Data aliases buf, or, for a large chunk decoded in place, Data
// is nil and segs alias the frames' buffers (ref). Read it through data,
// and release it once the data is no longer used.
type chunkMsg struct {
	willowv1.Chunk
	buf  mem.Buffer
	segs [][]byte
	ref  mem.BufferSlice
}

// Bounds of the in-place decoding: a chunk of segmentedChunkBytes or more
// that came in at most maxChunkSegs frame buffers (a 1 MiB chunk comes in
// 64 frames of 16 KiB). A chunk in more, smaller frames is gathered, so
// that a write never needs more than maxChunkSegs vectors.
const (
	segmentedChunkBytes = 64 << 10
	maxChunkSegs        = 256
)

// data is the chunk's data, as consecutive segments.
func (m *chunkMsg) data() [][]byte {
	if m.segs != nil {
		return m.segs
	}
	if len(m.Data) == 0 {
		return nil
	}
	return [][]byte{m.Data}
}

// release returns the receive buffers to gRPC's pool and forgets the data.
func (m *chunkMsg) release() {
	if m == nil {
		return
	}
	m.Data, m.segs = nil, nil
	if m.buf != nil {
		m.buf.Free()
		m.buf = nil
	}
	if m.ref != nil {
		m.ref.Free()
		m.ref = nil
	}
}

// parseSegs decodes a Chunk spread over the buffers of bs without
// gathering them: Data's bytes become segs (each aliasing one buffer,
// without spare capacity), the other fields are copied out. It returns
// false, leaving m to be parsed again, for anything but the four fields
// with their wire types, well formed and with valid UTF-8 strings.
func (m *chunkMsg) parseSegs(bs mem.BufferSlice) bool {
	m.UploadId, m.Offset, m.Data, m.User, m.segs = "", 0, nil, "", nil
	r := segReader{bufs: make([][]byte, 0, len(bs))}
	for _, b := range bs {
		if d := b.ReadOnlyData(); len(d) > 0 {
			r.bufs, r.left = append(r.bufs, d), r.left+len(d)
		}
	}
	for r.left > 0 {
		tag, ok := r.varint()
		if !ok {
			return false
		}
		if tag>>3 > 4 {
			return false
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		switch {
		case num == 2 && typ == protowire.VarintType:
			v, ok := r.varint()
			if !ok {
				return false
			}
			m.Offset = int64(v)
		case (num == 1 || num == 3 || num == 4) && typ == protowire.BytesType:
			n, ok := r.varint()
			if !ok || n > uint64(r.left) {
				return false
			}
			if num == 3 {
				m.segs = r.take(int(n), m.segs[:0])
				continue
			}
			v := bytes.Join(r.take(int(n), nil), nil)
			if !utf8.Valid(v) {
				return false
			}
			if num == 1 {
				m.UploadId = string(v)
			} else {
				m.User = string(v)
			}
		default:
			return false
		}
	}
	if len(m.segs) == 0 {
		m.segs = nil
	}
	return true
}

// segReader reads consecutive bytes across buffers.
type segReader struct {
	bufs [][]byte // what is left, none empty, the first one from its read position
	left int      // bytes left in bufs
}

// varint reads one varint (at most 10 bytes, as protowire accepts).
func (r *segReader) varint() (uint64, bool) {
	var v uint64
	for i := 0; i < 10; i++ {
		if r.left == 0 {
			return 0, false
		}
		c := r.bufs[0][0]
		r.bufs[0] = r.bufs[0][1:]
		if len(r.bufs[0]) == 0 {
			r.bufs = r.bufs[1:]
		}
		r.left--
		if i == 9 && c > 1 {
			return 0, false // over 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, true
		}
	}
	return 0, false
}

// take appends the next n bytes (n <= left) to segs as slices of the
// buffers, without spare capacity.
func (r *segReader) take(n int, segs [][]byte) [][]byte {
	r.left -= n
	for n > 0 {
		k := min(n, len(r.bufs[0]))
		segs = append(segs, r.bufs[0][:k:k])
		r.bufs[0] = r.bufs[0][k:]
		if len(r.bufs[0]) == 0 {
			r.bufs = r.bufs[1:]
		}
		n -= k
	}
	return segs
}

// parse decodes a Chunk (upload.proto: upload_id 1, offset 2, data 3,
// user 4) as protobuf-go would, except that Data aliases b and unknown
// fields are dropped. Strings must be UTF-8, as proto3 requires.
func (m *chunkMsg) parse(b []byte) error {
	m.UploadId, m.Offset, m.Data, m.User, m.segs = "", 0, nil, "", nil
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
