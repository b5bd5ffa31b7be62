package master

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Records round-trip; the JSON form earlier masters wrote still decodes;
// truncated or trailing bytes are refused.
func TestRecordCodec(t *testing.T) {
	r := record{Info: []byte("info-proto"), Load: []byte{1, 2, 3}, LastMs: 1_764_000_000_123,
		Samples: []sample{{At: 1_764_000_000_000, Req: 1500, Err: 3}, {At: 1_764_000_001_000, Req: 0, Err: 0}}}
	b := appendRecord(nil, r)
	got, err := decodeRecord(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, r)
	}
	j, _ := json.Marshal(r)
	if got, err := decodeRecord(j); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("JSON form: %+v %v", got, err)
	}
	empty := record{LastMs: 5}
	if got, err := decodeRecord(appendRecord(nil, empty)); err != nil || got.LastMs != 5 || got.Samples != nil {
		t.Fatalf("empty record: %+v %v", got, err)
	}
	for i := range len(b) {
		if _, err := decodeRecord(b[:i]); err == nil {
			t.Errorf("truncated at %d of %d: decoded", i, len(b))
		}
	}
	if _, err := decodeRecord(append(b, 0)); err == nil {
		t.Error("trailing byte: decoded")
	}
}
