package compress

/*
#cgo pkg-config: libheif libde265
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <libheif/heif.h>
#include <libheif/heif_plugin.h>
#include <libde265/de265.h>

// A strict HEVC decoder plugin for libheif, over libde265. libheif's own
// libde265 plugin hands out whatever picture libde265 produced: libde265
// conceals damage inside slice data (it keeps decoding garbage, or stops
// a slice early and leaves CTBs undecoded) and reports it only as
// warnings and a picture integrity flag, which that plugin ignores. This
// one asks libde265 not to output faulty pictures
// (SUPPRESS_FAULTY_PICTURES), treats every decode error and every
// bitstream warning as a failure, and fails when no picture came out, so
// a damaged HEIC is an error, never garbled pixels.

typedef struct { de265_decoder_context* ctx; } strict_dec;

static const char* strict_name(void) { return "willow strict HEVC (libde265)"; }
static void strict_init(void) {}
static void strict_deinit(void) {}
// Above libheif's libde265 plugin (100), so libheif picks this one.
static int strict_supports(enum heif_compression_format f) { return f == heif_compression_HEVC ? 150 : 0; }

static struct heif_error strict_ok(void) {
	struct heif_error e = { heif_error_Ok, heif_suberror_Unspecified, "" };
	return e;
}

static struct heif_error strict_fail(const char* msg) {
	struct heif_error e = { heif_error_Decoder_plugin_error, heif_suberror_Unspecified, msg };
	return e;
}

static struct heif_error strict_new(void** dec) {
	strict_dec* d = (strict_dec*)calloc(1, sizeof(strict_dec));
	if (!d) return strict_fail("out of memory");
	d->ctx = de265_new_decoder();
	if (!d->ctx) { free(d); return strict_fail("libde265: no decoder"); }
	de265_set_parameter_bool(d->ctx, DE265_DECODER_PARAM_SUPPRESS_FAULTY_PICTURES, 1);
	*dec = d;
	return strict_ok();
}

static void strict_free(void* dec) {
	strict_dec* d = (strict_dec*)dec;
	if (!d) return;
	de265_free_decoder(d->ctx);
	free(d);
}

// push_data gets NAL units, each behind a 4-byte big-endian length.
static struct heif_error strict_push(void* dec, const void* data, size_t size) {
	strict_dec* d = (strict_dec*)dec;
	const uint8_t* p = (const uint8_t*)data;
	size_t pos = 0;
	while (pos < size) {
		if (size - pos < 4) return strict_fail("HEVC data: truncated NAL length");
		uint32_t n = ((uint32_t)p[pos] << 24) | ((uint32_t)p[pos+1] << 16) | ((uint32_t)p[pos+2] << 8) | p[pos+3];
		pos += 4;
		if (n == 0 || n > size - pos) return strict_fail("HEVC data: NAL length past the data");
		de265_error err = de265_push_NAL(d->ctx, p + pos, (int)n, 0, NULL);
		if (!de265_isOK(err)) return strict_fail("libde265: cannot take NAL unit");
		pos += n;
	}
	return strict_ok();
}

// harmless reports whether a libde265 warning says nothing about the
// bitstream's integrity.
static int harmless(de265_error w) {
	return w == DE265_WARNING_NO_WPP_CANNOT_USE_MULTITHREADING ||
		w == DE265_WARNING_NUMBER_OF_THREADS_LIMITED_TO_MAXIMUM ||
		w == DE265_WARNING_WARNING_BUFFER_FULL;
}

static struct heif_error copy_image(const struct de265_image* img, struct heif_image** out) {
	enum de265_chroma c = de265_get_chroma_format(img);
	enum heif_chroma hc;
	enum heif_colorspace cs = heif_colorspace_YCbCr;
	int planes = 3;
	switch (c) {
	case de265_chroma_mono: hc = heif_chroma_monochrome; cs = heif_colorspace_monochrome; planes = 1; break;
	case de265_chroma_420: hc = heif_chroma_420; break;
	case de265_chroma_422: hc = heif_chroma_422; break;
	case de265_chroma_444: hc = heif_chroma_444; break;
	default: return strict_fail("libde265: unknown chroma format");
	}
	int w = de265_get_image_width(img, 0), h = de265_get_image_height(img, 0);
	struct heif_image* him = NULL;
	struct heif_error err = heif_image_create(w, h, cs, hc, &him);
	if (err.code != heif_error_Ok) return err;
	static const enum heif_channel ch[3] = { heif_channel_Y, heif_channel_Cb, heif_channel_Cr };
	for (int i = 0; i < planes; i++) {
		int pw = de265_get_image_width(img, i), ph = de265_get_image_height(img, i);
		int bpp = de265_get_bits_per_pixel(img, i);
		int sstride = 0;
		const uint8_t* src = de265_get_image_plane(img, i, &sstride);
		if (!src || pw <= 0 || ph <= 0 || bpp <= 0 || bpp > 16) { heif_image_release(him); return strict_fail("libde265: bad plane"); }
		err = heif_image_add_plane(him, ch[i], pw, ph, bpp);
		if (err.code != heif_error_Ok) { heif_image_release(him); return err; }
		int dstride = 0;
		uint8_t* dst = heif_image_get_plane(him, ch[i], &dstride);
		if (!dst) { heif_image_release(him); return strict_fail("libheif: no plane"); }
		size_t row = (size_t)pw * ((bpp + 7) / 8);
		for (int y = 0; y < ph; y++) memcpy(dst + (size_t)y * dstride, src + (size_t)y * sstride, row);
	}
	*out = him;
	return strict_ok();
}

static struct heif_error strict_decode(void* dec, struct heif_image** out) {
	strict_dec* d = (strict_dec*)dec;
	*out = NULL;
	if (!de265_isOK(de265_flush_data(d->ctx))) return strict_fail("libde265: flush failed");
	struct heif_error res = strict_ok();
	int more = 1;
	while (more) {
		more = 0;
		de265_error err = de265_decode(d->ctx, &more);
		if (err == DE265_ERROR_WAITING_FOR_INPUT_DATA) break;
		if (!de265_isOK(err)) { res = strict_fail("HEVC data corrupt: decode error"); break; }
		const struct de265_image* img = de265_get_next_picture(d->ctx);
		if (img && *out == NULL && res.code == heif_error_Ok) {
			res = copy_image(img, out);
			de265_release_next_picture(d->ctx);
		}
	}
	for (de265_error w = de265_get_warning(d->ctx); w != DE265_OK; w = de265_get_warning(d->ctx)) {
		if (!harmless(w) && res.code == heif_error_Ok) res = strict_fail("HEVC data corrupt: decoder warning");
	}
	if (res.code == heif_error_Ok && *out == NULL) res = strict_fail("HEVC data corrupt: no intact picture decoded");
	if (res.code != heif_error_Ok && *out) { heif_image_release(*out); *out = NULL; }
	return res;
}

static void strict_set_strict(void* dec, int flag) { (void)dec; (void)flag; }

static const struct heif_decoder_plugin strict_plugin = {
	3, strict_name, strict_init, strict_deinit, strict_supports, strict_new, strict_free,
	strict_push, strict_decode, strict_set_strict, "willow-strict-hevc",
};

static struct heif_error register_strict(void) { return heif_register_decoder_plugin(&strict_plugin); }
*/
import "C"

import (
	"fmt"
	"sync"
)

// strictHEVC registers the strict HEVC decoder plugin with libheif once,
// for the process (libheif's plugin registry is process-wide); decodeHEIC
// calls it before decoding.
var strictHEVC = sync.OnceValue(func() error {
	if err := heifErr("register strict HEVC decoder", C.register_strict()); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	return nil
})
