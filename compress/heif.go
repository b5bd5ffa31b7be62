package compress

/*
#cgo pkg-config: libheif
#include <stdlib.h>
#include <string.h>
#include <libheif/heif.h>

typedef struct { char* buf; size_t len; size_t cap; int failed; } membuf;

static struct heif_error membuf_write(struct heif_context* ctx, const void* data, size_t size, void* userdata) {
	membuf* m = (membuf*)userdata;
	struct heif_error ok = { heif_error_Ok, heif_suberror_Unspecified, "" };
	if (m->len + size > m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 65536;
		while (nc < m->len + size) nc *= 2;
		char* nb = realloc(m->buf, nc);
		if (!nb) {
			struct heif_error e = { heif_error_Encoding_error, heif_suberror_Cannot_write_output_data, "out of memory" };
			m->failed = 1;
			return e;
		}
		m->buf = nb; m->cap = nc;
	}
	memcpy(m->buf + m->len, data, size);
	m->len += size;
	return ok;
}

static struct heif_error write_mem(struct heif_context* ctx, membuf* m) {
	struct heif_writer w;
	w.writer_api_version = 1;
	w.write = membuf_write;
	return heif_context_write(ctx, &w, m);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"strings"
	"unsafe"
)

// heifErr turns a libheif error into a Go error, or nil.
func heifErr(op string, e C.struct_heif_error) error {
	if e.code == C.heif_error_Ok {
		return nil
	}
	return fmt.Errorf("libheif %s: %s", op, C.GoString(e.message))
}

// encodeHEIC encodes an opaque image as HEIC (HEVC via libheif's x265
// plugin) at quality 0..100 with the given x265 preset and tune, and x265
// parameters "name=value" (libheif's "x265:name"). No metadata is written.
func encodeHEIC(img *image.NRGBA, quality int, preset, tune string, x265 []string) ([]byte, error) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	ctx := C.heif_context_alloc()
	if ctx == nil {
		return nil, errors.New("libheif: context alloc failed")
	}
	defer C.heif_context_free(ctx)

	var enc *C.struct_heif_encoder
	if err := heifErr("get encoder", C.heif_context_get_encoder_for_format(ctx, C.heif_compression_HEVC, &enc)); err != nil {
		return nil, err
	}
	defer C.heif_encoder_release(enc)
	if err := heifErr("set quality", C.heif_encoder_set_lossy_quality(enc, C.int(quality))); err != nil {
		return nil, err
	}
	params := [][2]string{{"preset", preset}, {"tune", tune}}
	for _, kv := range x265 {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("x265 parameter %q: want name=value", kv)
		}
		params = append(params, [2]string{"x265:" + k, v})
	}
	for _, p := range params {
		if p[1] == "" {
			continue
		}
		cn, cv := C.CString(p[0]), C.CString(p[1])
		err := heifErr("set "+p[0], C.heif_encoder_set_parameter_string(enc, cn, cv))
		C.free(unsafe.Pointer(cn))
		C.free(unsafe.Pointer(cv))
		if err != nil {
			return nil, err
		}
	}
	cn, cv := C.CString("chroma"), C.CString("420")
	C.heif_encoder_set_parameter_string(enc, cn, cv) // best effort: 420 is the default
	C.free(unsafe.Pointer(cn))
	C.free(unsafe.Pointer(cv))

	var him *C.struct_heif_image
	if err := heifErr("create image", C.heif_image_create(C.int(w), C.int(h), C.heif_colorspace_RGB, C.heif_chroma_interleaved_RGB, &him)); err != nil {
		return nil, err
	}
	defer C.heif_image_release(him)
	if err := heifErr("add plane", C.heif_image_add_plane(him, C.heif_channel_interleaved, C.int(w), C.int(h), 8)); err != nil {
		return nil, err
	}
	var stride C.int
	p := C.heif_image_get_plane(him, C.heif_channel_interleaved, &stride)
	if p == nil {
		return nil, errors.New("libheif: no interleaved plane")
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(p)), int(stride)*h)
	for y := 0; y < h; y++ {
		s := img.Pix[y*img.Stride : y*img.Stride+4*w]
		d := dst[y*int(stride) : y*int(stride)+3*w]
		for x, j := 0, 0; x < 4*w; x, j = x+4, j+3 {
			d[j], d[j+1], d[j+2] = s[x], s[x+1], s[x+2]
		}
	}
	var handle *C.struct_heif_image_handle
	if err := heifErr("encode", C.heif_context_encode_image(ctx, him, enc, nil, &handle)); err != nil {
		return nil, err
	}
	C.heif_image_handle_release(handle)

	var m C.membuf
	defer C.free(unsafe.Pointer(m.buf))
	if err := heifErr("write", C.write_mem(ctx, &m)); err != nil {
		return nil, err
	}
	return C.GoBytes(unsafe.Pointer(m.buf), C.int(m.len)), nil
}

// decodeHEIC decodes the primary image of a HEIC file to NRGBA, with the
// HEIF transformations (irot, imir, clap) applied, so the result is upright.
// maxPixels is checked against the primary image before decoding.
func decodeHEIC(data []byte, maxPixels int64) (*image.NRGBA, error) {
	if err := strictHEVC(); err != nil {
		return nil, err
	}
	// The context reads cdata in place, so cdata is freed after it.
	cdata := C.CBytes(data)
	defer C.free(cdata)
	ctx := C.heif_context_alloc()
	if ctx == nil {
		return nil, errors.New("libheif: context alloc failed")
	}
	defer C.heif_context_free(ctx)
	if err := heifErr("read", C.heif_context_read_from_memory_without_copy(ctx, cdata, C.size_t(len(data)), nil)); err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	var handle *C.struct_heif_image_handle
	if err := heifErr("primary image", C.heif_context_get_primary_image_handle(ctx, &handle)); err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	defer C.heif_image_handle_release(handle)
	iw, ih := int(C.heif_image_handle_get_width(handle)), int(C.heif_image_handle_get_height(handle))
	if int64(iw)*int64(ih) > maxPixels {
		return nil, fmt.Errorf("heic %dx%d: %w", iw, ih, ErrPixelBomb)
	}
	// Strict decoding: a bitstream error partway is an error, never a
	// variant made of concealed, garbled pixels. The HEVC data goes
	// through the strict plugin (heifstrict.go), which fails on libde265's
	// errors and warnings; libheif's own strict mode and decoding warnings
	// are checked as well, for other decoder plugins.
	opts := C.heif_decoding_options_alloc()
	if opts == nil {
		return nil, errors.New("libheif: decoding options alloc failed")
	}
	defer C.heif_decoding_options_free(opts)
	opts.strict_decoding = 1
	var him *C.struct_heif_image
	if err := heifErr("decode", C.heif_decode_image(handle, &him, C.heif_colorspace_RGB, C.heif_chroma_interleaved_RGB, opts)); err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	defer C.heif_image_release(him)
	var warn C.struct_heif_error
	if C.heif_image_get_decoding_warnings(him, 0, &warn, 1) > 0 {
		return nil, fmt.Errorf("libheif decode: %s: %w", C.GoString(warn.message), ErrCorrupt)
	}
	w := int(C.heif_image_get_width(him, C.heif_channel_interleaved))
	h := int(C.heif_image_get_height(him, C.heif_channel_interleaved))
	var stride C.int
	p := C.heif_image_get_plane_readonly(him, C.heif_channel_interleaved, &stride)
	if p == nil || w <= 0 || h <= 0 {
		return nil, fmt.Errorf("libheif: no decoded plane: %w", ErrCorrupt)
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(p)), int(stride)*h)
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		s := src[y*int(stride) : y*int(stride)+3*w]
		d := out.Pix[y*out.Stride : y*out.Stride+4*w]
		for x, j := 0, 0; j < 3*w; x, j = x+4, j+3 {
			d[x], d[x+1], d[x+2], d[x+3] = s[j], s[j+1], s[j+2], 255
		}
	}
	return out, nil
}
