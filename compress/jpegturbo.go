package compress

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int warnings;
	char msg[JMSG_LENGTH_MAX];
} willow_err;

static void willow_error_exit(j_common_ptr c) {
	willow_err* e = (willow_err*)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

static void willow_emit(j_common_ptr c, int level) {
	willow_err* e = (willow_err*)c->err;
	if (level < 0 && e->warnings++ == 0) {
		(*c->err->format_message)(c, e->msg); // corrupt data: keep the first
	}
}

// willow_jpeg decodes data scaled by num/8 (the smallest num whose long
// edge still reaches target) to RGBA. With out == NULL it only reports the
// scaled size. Returns 0 on success, 1 on error (msg set), 2 when the
// colour space needs the Go decoder (CMYK).
static int willow_jpeg(const unsigned char* data, unsigned long len, int target,
		unsigned char* out, int stride, int* w, int* h, char* msg) {
	struct jpeg_decompress_struct cinfo;
	willow_err err;
	memset(&err, 0, sizeof err);
	cinfo.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = willow_error_exit;
	err.pub.emit_message = willow_emit;
	if (setjmp(err.jb)) {
		jpeg_destroy_decompress(&cinfo);
		strncpy(msg, err.msg, JMSG_LENGTH_MAX - 1);
		return 1;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, data, len);
	jpeg_read_header(&cinfo, TRUE);
	if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
		jpeg_destroy_decompress(&cinfo);
		return 2;
	}
	int long_edge = cinfo.image_width > cinfo.image_height ? cinfo.image_width : cinfo.image_height;
	int num = 8;
	if (target > 0) {
		for (int m = 1; m <= 8; m++) {
			if ((long_edge * m + 7) / 8 >= target) { num = m; break; }
		}
	}
	cinfo.scale_num = num;
	cinfo.scale_denom = 8;
	cinfo.out_color_space = JCS_EXT_RGBA;
	cinfo.dct_method = JDCT_ISLOW;
	jpeg_calc_output_dimensions(&cinfo);
	*w = cinfo.output_width;
	*h = cinfo.output_height;
	if (out == NULL) {
		jpeg_destroy_decompress(&cinfo);
		return 0;
	}
	jpeg_start_decompress(&cinfo);
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = out + (size_t)cinfo.output_scanline * stride;
		jpeg_read_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_decompress(&cinfo);
	jpeg_destroy_decompress(&cinfo);
	if (err.warnings) {
		strncpy(msg, err.msg, JMSG_LENGTH_MAX - 1);
		return 1;
	}
	return 0;
}

// willow_jpeg_encode encodes w x h RGBA pixels (alpha ignored) at quality
// with optimized Huffman tables, 4:2:0, baseline, into a buffer that
// libjpeg allocates (*out, *outlen; the caller frees it). Returns 0 on
// success, 1 on error (msg set).
static int willow_jpeg_encode(const unsigned char* px, int w, int h, int stride, int quality,
		unsigned char** out, unsigned long* outlen, char* msg) {
	struct jpeg_compress_struct cinfo;
	willow_err err;
	memset(&err, 0, sizeof err);
	cinfo.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = willow_error_exit;
	*out = NULL;
	*outlen = 0;
	if (setjmp(err.jb)) {
		jpeg_destroy_compress(&cinfo);
		if (*out) { free(*out); *out = NULL; }
		strncpy(msg, err.msg, JMSG_LENGTH_MAX - 1);
		return 1;
	}
	jpeg_create_compress(&cinfo);
	jpeg_mem_dest(&cinfo, out, outlen);
	cinfo.image_width = w;
	cinfo.image_height = h;
	cinfo.input_components = 4;
	cinfo.in_color_space = JCS_EXT_RGBA;
	jpeg_set_defaults(&cinfo);
	jpeg_set_quality(&cinfo, quality, TRUE);
	cinfo.optimize_coding = TRUE;
	cinfo.dct_method = JDCT_ISLOW;
	jpeg_start_compress(&cinfo, TRUE);
	while (cinfo.next_scanline < cinfo.image_height) {
		JSAMPROW row = (JSAMPROW)(px + (size_t)cinfo.next_scanline * stride);
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"image"
	"unsafe"
)

// errUseGo says the JPEG needs the pure Go decoder (CMYK, YCCK).
var errUseGo = fmt.Errorf("jpeg colour space needs the Go decoder")

// decodeJPEGScaled decodes a JPEG with libjpeg-turbo, shrinking it in the
// DCT domain by the largest factor n/8 that keeps its long edge at least
// target (target <= 0: full size). Corrupt data, including libjpeg
// warnings such as a premature end of file, is ErrCorrupt.
func decodeJPEGScaled(data []byte, target int) (*image.NRGBA, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("jpeg: empty: %w", ErrCorrupt)
	}
	var msg [C.JMSG_LENGTH_MAX]C.char
	var w, h C.int
	p := (*C.uchar)(unsafe.Pointer(&data[0]))
	switch C.willow_jpeg(p, C.ulong(len(data)), C.int(target), nil, 0, &w, &h, &msg[0]) {
	case 1:
		return nil, fmt.Errorf("jpeg: %s: %w", C.GoString(&msg[0]), ErrCorrupt)
	case 2:
		return nil, errUseGo
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("jpeg: %dx%d: %w", w, h, ErrCorrupt)
	}
	img := image.NewNRGBA(image.Rect(0, 0, int(w), int(h)))
	var w2, h2 C.int
	if C.willow_jpeg(p, C.ulong(len(data)), C.int(target), (*C.uchar)(unsafe.Pointer(&img.Pix[0])), C.int(img.Stride), &w2, &h2, &msg[0]) != 0 {
		return nil, fmt.Errorf("jpeg: %s: %w", C.GoString(&msg[0]), ErrCorrupt)
	}
	if w2 != w || h2 != h {
		return nil, fmt.Errorf("jpeg: size changed between passes: %w", ErrCorrupt)
	}
	return img, nil
}

// encodeJPEG encodes an opaque image with libjpeg-turbo at quality (1-100):
// optimized Huffman tables, 4:2:0 chroma, baseline. Errors are libjpeg's.
func encodeJPEG(img *image.NRGBA, quality int) ([]byte, error) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("jpeg encode: empty image")
	}
	var msg [C.JMSG_LENGTH_MAX]C.char
	var out *C.uchar
	var n C.ulong
	p := (*C.uchar)(unsafe.Pointer(&img.Pix[img.PixOffset(img.Rect.Min.X, img.Rect.Min.Y)]))
	if C.willow_jpeg_encode(p, C.int(w), C.int(h), C.int(img.Stride), C.int(quality), &out, &n, &msg[0]) != 0 {
		return nil, fmt.Errorf("jpeg encode: %s", C.GoString(&msg[0]))
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoBytes(unsafe.Pointer(out), C.int(n)), nil
}
