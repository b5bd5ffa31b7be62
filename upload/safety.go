package upload

import (
	"io"

	"willow/mediaheader"
	willowv1 "willow/proto/willow/v1"
)

// sniffUpload names the format of an upload from its first bytes and
// returns the content type to store, or INVALID_ARGUMENT
// unsupported_format.
func sniffUpload(r io.ReaderAt, size int64, kind willowv1.Kind) (string, error) {
	head := make([]byte, min(size, mediaheader.SniffBytes))
	n, err := r.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return "", errInternal(err)
	}
	return sniffHead(head[:n], kind)
}

func sniffHead(head []byte, kind willowv1.Kind) (string, error) {
	t, ok := mediaheader.Sniff(head)
	if !ok || !t.Input {
		return "", fail(ReasonUnsupportedFormat, "the bytes are not an accepted image or video format (JPEG, PNG, HEIC/HEIF, AVIF; MP4, MOV, 3GP, WebM, Matroska, AVI, MPEG)")
	}
	if t.Video != (kind == willowv1.Kind_KIND_VIDEO) {
		return "", fail(ReasonUnsupportedFormat, "the bytes are %s, but the upload was begun as %s", t.ContentType, kindName(kind))
	}
	return t.ContentType, nil
}

// sniffEarly refuses an upload whose first chunk (segs, at offset off)
// already shows it is not an accepted format, before the rest is sent;
// Commit checks again on the whole. Only a chunk at offset 0 with the
// first SniffBytes (or the whole upload) is sniffed, its head gathered
// when it spans segments.
func sniffEarly(st *staged, off int64, segs [][]byte) error {
	if off != 0 || int64(segsLen(segs)) < min(st.meta.Size, mediaheader.SniffBytes) {
		return nil
	}
	var head []byte
	if len(segs) > 0 {
		head = segs[0]
	}
	if len(head) < mediaheader.SniffBytes && len(segs) > 1 {
		head = nil
		for _, b := range segs {
			if len(head) >= mediaheader.SniffBytes {
				break
			}
			head = append(head, b[:min(len(b), mediaheader.SniffBytes-len(head))]...)
		}
	}
	_, err := sniffHead(head[:min(len(head), mediaheader.SniffBytes)], willowv1.Kind(st.meta.Kind))
	return err
}
