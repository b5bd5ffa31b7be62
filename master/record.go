package master

import (
	"encoding/binary"
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/proto"
)

// A registry record in Redis (key node:ID) is binary: a version byte
// recordV1, then as unsigned varints the length of the NodeInfo proto and
// the proto, the length of the Load proto and the proto, the last
// heartbeat (unix ms), the number of samples and each sample's at, req
// and err (at as a varint, the counts zig-zag). A record that starts with
// '{' is the JSON form earlier masters wrote. Every master decodes every
// record that changed since its last registry load, about N a second for
// N nodes, so the format is for decoding speed: JSON cost a tenth of
// the master's CPU at N = 1000 (BenchmarkFleet).
const recordV1 = 1

var errBadRecord = errors.New("master: bad registry record")

func appendRecord(b []byte, r record) []byte {
	b = append(b, recordV1)
	b = binary.AppendUvarint(b, uint64(len(r.Info)))
	b = append(b, r.Info...)
	b = binary.AppendUvarint(b, uint64(len(r.Load)))
	b = append(b, r.Load...)
	b = binary.AppendVarint(b, r.LastMs)
	b = binary.AppendUvarint(b, uint64(len(r.Samples)))
	for _, s := range r.Samples {
		b = binary.AppendVarint(b, s.At)
		b = binary.AppendVarint(b, s.Req)
		b = binary.AppendVarint(b, s.Err)
	}
	return b
}

// appendRecordOf appends the record of info and load (their sizes is
// and ls, from proto.Size just before), marshalling them in place: what
// appendRecord writes for their marshalled forms.
func appendRecordOf(b []byte, info proto.Message, is int, load proto.Message, ls int, lastMs int64, samples []sample) ([]byte, error) {
	cached := proto.MarshalOptions{UseCachedSize: true}
	var err error
	b = append(b, recordV1)
	b = binary.AppendUvarint(b, uint64(is))
	if b, err = cached.MarshalAppend(b, info); err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(b, uint64(ls))
	if b, err = cached.MarshalAppend(b, load); err != nil {
		return nil, err
	}
	b = binary.AppendVarint(b, lastMs)
	b = binary.AppendUvarint(b, uint64(len(samples)))
	for _, s := range samples {
		b = binary.AppendVarint(b, s.At)
		b = binary.AppendVarint(b, s.Req)
		b = binary.AppendVarint(b, s.Err)
	}
	return b, nil
}

// decodeRecord decodes a record in either form. Info and Load alias b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) > 0 && b[0] == '{' {
		err := json.Unmarshal(b, &r)
		return r, err
	}
	if len(b) == 0 || b[0] != recordV1 {
		return r, errBadRecord
	}
	b = b[1:]
	bytesField := func() []byte {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			b = nil
			return nil
		}
		f := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return f
	}
	bad := false
	varint := func() int64 {
		v, k := binary.Varint(b)
		if k <= 0 {
			bad = true
			return 0
		}
		b = b[k:]
		return v
	}
	if r.Info = bytesField(); b == nil {
		return r, errBadRecord
	}
	if r.Load = bytesField(); b == nil {
		return r, errBadRecord
	}
	r.LastMs = varint()
	n, k := binary.Uvarint(b)
	if bad || k <= 0 || n > uint64(len(b)) { // a sample takes 3 bytes at least
		return r, errBadRecord
	}
	b = b[k:]
	if n > 0 {
		r.Samples = make([]sample, n)
	}
	for i := range r.Samples {
		r.Samples[i] = sample{At: varint(), Req: varint(), Err: varint()}
	}
	if bad || len(b) != 0 {
		return r, errBadRecord
	}
	return r, nil
}
