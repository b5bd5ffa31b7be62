// Package mediaheader reads the dimensions of an image — JPEG, PNG or
// HEIC — from its header alone, without decoding pixels, so a pixel bomb
// (a header claiming 50000 x 50000) is refused before any decode. It is
// pure Go (no cgo), so the upload front can check the first bytes of an
// upload while the compress worker checks again before decoding.
package mediaheader

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // registers the JPEG header reader for image.DecodeConfig
	_ "image/png"  // registers the PNG header reader for image.DecodeConfig
	"io"
)

// Format is the container of an input image.
type Format string

// Input formats CheckHeader recognises.
const (
	FormatJPEG Format = "jpeg"
	FormatPNG  Format = "png"
	FormatHEIC Format = "heic"
)

// Errors, tested with errors.Is.
var (
	ErrPixelBomb   = errors.New("image header claims too many pixels")
	ErrCorrupt     = errors.New("corrupt or truncated media")
	ErrUnsupported = errors.New("unsupported media format")
)

// maxHeaderBytes bounds how much of a file CheckHeader reads. A JPEG SOF
// comes after the APP segments (EXIF up to 64 KiB each) and a HEIC meta box
// is small; 1 MiB is generous.
const maxHeaderBytes = 1 << 20

// Check reads only the header of an image from r (at most 1 MiB) and
// returns its format and dimensions (as stored, before EXIF orientation).
// It returns ErrPixelBomb (wrapped) when width x height exceeds maxPixels
// (maxPixels must be > 0), ErrUnsupported for an unknown
// format and ErrCorrupt for a header it cannot parse. It never decodes
// pixel data, so the upload front can call it on the first bytes.
func Check(r io.Reader, maxPixels int64) (Format, int, int, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxHeaderBytes), 4096)
	magic, err := br.Peek(12)
	if err != nil && len(magic) < 4 {
		return "", 0, 0, fmt.Errorf("read header: %w", ErrCorrupt)
	}
	var f Format
	var w, h int
	switch {
	case bytes.HasPrefix(magic, []byte{0xFF, 0xD8, 0xFF}):
		f = FormatJPEG
		w, h, err = configOf(br)
	case bytes.HasPrefix(magic, []byte("\x89PNG\r\n\x1a\n")):
		f = FormatPNG
		w, h, err = configOf(br)
	case len(magic) >= 12 && string(magic[4:8]) == "ftyp" && heifBrand(string(magic[8:12])):
		f = FormatHEIC
		w, h, err = heifSize(br)
	default:
		return "", 0, 0, ErrUnsupported
	}
	if err != nil {
		return f, 0, 0, err
	}
	if w <= 0 || h <= 0 {
		return f, w, h, fmt.Errorf("%s header: %dx%d: %w", f, w, h, ErrCorrupt)
	}
	if int64(w)*int64(h) > maxPixels {
		return f, w, h, fmt.Errorf("%s header %dx%d over %d pixels: %w", f, w, h, maxPixels, ErrPixelBomb)
	}
	return f, w, h, nil
}

func configOf(r io.Reader) (int, int, error) {
	c, _, err := image.DecodeConfig(r)
	if err != nil {
		return 0, 0, fmt.Errorf("decode header: %v: %w", err, ErrCorrupt)
	}
	return c.Width, c.Height, nil
}

func heifBrand(b string) bool {
	switch b {
	case "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1", "avif":
		return true
	}
	return false
}

// heifSize walks the ISO BMFF boxes ftyp, meta > iprp > ipco and returns the
// largest ispe (image spatial extents) property: the primary image or its
// grid, whichever is bigger, which is what a decoder would allocate.
func heifSize(r io.Reader) (int, int, error) {
	w, h := 0, 0
	found := false
	var walk func(r io.Reader, limit int64, depth int) error
	walk = func(r io.Reader, limit int64, depth int) error {
		for limit > 0 {
			var hdr [8]byte
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				if found {
					return nil
				}
				return fmt.Errorf("heif box: %v: %w", err, ErrCorrupt)
			}
			size := int64(binary.BigEndian.Uint32(hdr[:4]))
			typ := string(hdr[4:8])
			hl := int64(8)
			if size == 1 {
				var ext [8]byte
				if _, err := io.ReadFull(r, ext[:]); err != nil {
					return fmt.Errorf("heif box: %v: %w", err, ErrCorrupt)
				}
				size = int64(binary.BigEndian.Uint64(ext[:]))
				hl = 16
			} else if size == 0 {
				size = limit
			}
			if size < hl || size > limit {
				return fmt.Errorf("heif box %q size %d: %w", typ, size, ErrCorrupt)
			}
			body := io.LimitReader(r, size-hl)
			switch {
			case typ == "meta" && depth == 0:
				var fb [4]byte // full box version and flags
				if _, err := io.ReadFull(body, fb[:]); err != nil {
					return fmt.Errorf("heif meta: %w", ErrCorrupt)
				}
				if err := walk(body, size-hl-4, depth+1); err != nil {
					return err
				}
				return finish(found)
			case (typ == "iprp" && depth == 1) || (typ == "ipco" && depth == 2):
				if err := walk(body, size-hl, depth+1); err != nil {
					return err
				}
			case typ == "ispe" && depth == 3:
				var b [12]byte
				if _, err := io.ReadFull(body, b[:]); err != nil {
					return fmt.Errorf("heif ispe: %w", ErrCorrupt)
				}
				iw, ih := int(binary.BigEndian.Uint32(b[4:8])), int(binary.BigEndian.Uint32(b[8:12]))
				if int64(iw)*int64(ih) > int64(w)*int64(h) {
					w, h = iw, ih
				}
				found = true
			case depth == 0 && typ == "mdat":
				return finish(found) // meta comes first in any file we can parse
			}
			if _, err := io.Copy(io.Discard, body); err != nil {
				return fmt.Errorf("heif box %q: %w", typ, ErrCorrupt)
			}
			limit -= size
		}
		return nil
	}
	if err := walk(r, maxHeaderBytes, 0); err != nil {
		return 0, 0, err
	}
	if !found {
		return 0, 0, fmt.Errorf("heif: no ispe property: %w", ErrCorrupt)
	}
	return w, h, nil
}

func finish(found bool) error {
	if !found {
		return fmt.Errorf("heif: no ispe property: %w", ErrCorrupt)
	}
	return nil
}
