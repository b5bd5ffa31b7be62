package mediaheader

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// SniffBytes is how much of the start of a file Sniff wants (it decides on
// less when the file is shorter).
const SniffBytes = 512

// Type is a media format recognised from the bytes.
type Type struct {
	// ContentType is what Willow stores and serves for it.
	ContentType string
	// Video is set for video containers, clear for still images.
	Video bool
	// Input is set when the format is accepted as an upload (the compress
	// worker decodes it); output-only formats (WebP) have it clear.
	Input bool
}

// Content types Sniff returns.
const (
	TypeJPEG      = "image/jpeg"
	TypePNG       = "image/png"
	TypeHEIC      = "image/heic"
	TypeHEIF      = "image/heif"
	TypeAVIF      = "image/avif"
	TypeWebP      = "image/webp"
	TypeMP4       = "video/mp4"
	TypeQuickTime = "video/quicktime"
	Type3GPP      = "video/3gpp"
	TypeWebM      = "video/webm"
	TypeMatroska  = "video/x-matroska"
	TypeAVI       = "video/x-msvideo"
	TypeMPEG      = "video/mpeg"
	TypeMPEGTS    = "video/mp2t"
)

// Sniff names the media format of a file from its first bytes (head; give
// it SniffBytes when the file is that long). ok is false for anything that
// is not a media format Willow serves: HTML, SVG, scripts, PDFs, archives,
// text. The client's declared content type plays no part.
func Sniff(head []byte) (t Type, ok bool) {
	img := func(ct string) (Type, bool) { return Type{ContentType: ct, Input: true}, true }
	vid := func(ct string) (Type, bool) { return Type{ContentType: ct, Video: true, Input: true}, true }
	switch {
	case bytes.HasPrefix(head, []byte{0xFF, 0xD8, 0xFF}):
		return img(TypeJPEG)
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return img(TypePNG)
	case len(head) >= 12 && string(head[0:4]) == "RIFF" && string(head[8:12]) == "WEBP":
		return Type{ContentType: TypeWebP}, true
	case len(head) >= 12 && string(head[0:4]) == "RIFF" && string(head[8:12]) == "AVI ":
		return vid(TypeAVI)
	case len(head) >= 12 && string(head[4:8]) == "ftyp":
		return sniffISOBMFF(head)
	case len(head) >= 8 && qtAtom(string(head[4:8])):
		// QuickTime files from before ftyp start with a top-level atom.
		return vid(TypeQuickTime)
	case bytes.HasPrefix(head, []byte{0x1A, 0x45, 0xDF, 0xA3}):
		// EBML: the DocType element (0x4282) says webm or matroska.
		if i := bytes.Index(head, []byte{0x42, 0x82}); i > 0 && i+3 < len(head) {
			if bytes.HasPrefix(head[i+3:], []byte("webm")) {
				return vid(TypeWebM)
			}
			if bytes.HasPrefix(head[i+3:], []byte("matroska")) {
				return vid(TypeMatroska)
			}
		}
		return Type{}, false
	case bytes.HasPrefix(head, []byte{0, 0, 1, 0xBA}), bytes.HasPrefix(head, []byte{0, 0, 1, 0xB3}):
		// MPEG program stream pack header, or an elementary stream's
		// sequence header.
		return vid(TypeMPEG)
	case len(head) > 376 && head[0] == 0x47 && head[188] == 0x47 && head[376] == 0x47:
		return vid(TypeMPEGTS)
	}
	return Type{}, false
}

func qtAtom(s string) bool {
	switch s {
	case "moov", "mdat", "wide", "free", "skip", "pnot":
		return true
	}
	return false
}

// sniffISOBMFF decides by the ftyp box's major brand, then its compatible
// brands.
func sniffISOBMFF(head []byte) (Type, bool) {
	size := int(binary.BigEndian.Uint32(head[0:4]))
	if size < 16 || size > len(head) {
		size = min(len(head), 64)
	}
	brands := []string{string(head[8:12])}
	for i := 16; i+4 <= size; i += 4 {
		brands = append(brands, string(head[i:i+4]))
	}
	for _, b := range brands {
		if t, ok := brandType(b); ok {
			return t, true
		}
	}
	return Type{}, false
}

func brandType(b string) (Type, bool) {
	switch b {
	case "heic", "heix", "heim", "heis", "hevc", "hevx":
		return Type{ContentType: TypeHEIC, Input: true}, true
	case "mif1", "msf1":
		return Type{ContentType: TypeHEIF, Input: true}, true
	case "avif", "avis":
		return Type{ContentType: TypeAVIF, Input: true}, true
	case "qt  ":
		return Type{ContentType: TypeQuickTime, Video: true, Input: true}, true
	}
	switch {
	case strings.HasPrefix(b, "3gp"), strings.HasPrefix(b, "3g2"):
		return Type{ContentType: Type3GPP, Video: true, Input: true}, true
	case strings.HasPrefix(b, "iso"), strings.HasPrefix(b, "mp4"), strings.HasPrefix(b, "avc"),
		b == "M4V ", b == "M4VH", b == "M4VP", b == "dash", b == "MSNV", b == "f4v ":
		return Type{ContentType: TypeMP4, Video: true, Input: true}, true
	}
	return Type{}, false
}

// IsMedia reports whether ct is one of the content types Sniff returns.
func IsMedia(ct string) bool {
	switch ct {
	case TypeJPEG, TypePNG, TypeHEIC, TypeHEIF, TypeAVIF, TypeWebP, TypeMP4, TypeQuickTime, Type3GPP,
		TypeWebM, TypeMatroska, TypeAVI, TypeMPEG, TypeMPEGTS:
		return true
	}
	return false
}
