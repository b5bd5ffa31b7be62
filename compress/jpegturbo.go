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
