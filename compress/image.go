package compress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"

	"github.com/disintegration/imaging"

	"willow/flex"
	"willow/limits"
	"willow/media"
	"willow/mediaheader"
)

// CodecH264 is the codec label of video outputs. Image codecs are the
// image_codec knob's values, flex.CodecHEIC and flex.CodecJPEG.
const CodecH264 = "h264"

// Preset is one image rendition: its variant name and the long edge it is
// fitted into. Images are never upscaled.
type Preset struct {
	Name     string
	LongEdge int
}

// Presets are the image variants, largest first (each is resized from the
// previous one).
var Presets = []Preset{
	{media.VariantLarge, 1920},
	{media.VariantMedium, 1080},
	{media.VariantThumb, 240},
}

// ImageOptions steer Images. Zero values mean the documented defaults.
type ImageOptions struct {
	// Codec is flex.CodecHEIC or flex.CodecJPEG; default flex.CodecHEIC.
	Codec flex.ImageCodec
	// Quality is the encoder quality 1..100; default flex.DefaultImageQuality.
	Quality int
	// MaxPixels bounds width x height of the input; default limits.DefaultMaxPixels.
	MaxPixels int64
	// HEICPreset is the x265 preset; default DefaultHEICPreset.
	HEICPreset string
	// HEICTune is the x265 tune (ssim, psnr, grain, fastdecode); default
	// DefaultHEICTune.
	HEICTune string
	// HEICX265 are extra x265 parameters, "name=value" (x265's own option
	// names, passed to libheif as "x265:name"); default DefaultHEICX265.
	HEICX265 []string
	// HEICThumbJPEG, when positive, is the JPEG quality the thumb rendition
	// of a HEIC task is encoded with instead of HEIC; negative keeps it
	// HEIC; zero means DefaultHEICThumbJPEG.
	HEICThumbJPEG int
}

// Output is one encoded variant.
type Output struct {
	Name        string
	Codec       string
	Quality     int // encoder quality, or kbps for video
	Width       int
	Height      int
	ContentType string
	Data        []byte
	SHA256      string
}

func newOutput(name, codec string, quality, w, h int, ct string, data []byte) Output {
	sum := sha256.Sum256(data)
	return Output{Name: name, Codec: codec, Quality: quality, Width: w, Height: h,
		ContentType: ct, Data: data, SHA256: hex.EncodeToString(sum[:])}
}

// Images makes the preset variants of one image held in data. It checks
// the header first (ErrPixelBomb, ErrUnsupported, ErrCorrupt), decodes,
// applies the EXIF orientation, resizes and encodes; the outputs carry no
// metadata. It returns ctx.Err() (wrapped) if ctx ends between steps.
func Images(ctx context.Context, data []byte, opt ImageOptions) ([]Output, error) {
	opt = opt.withDefaults()
	src, err := decode(data, opt.MaxPixels, Presets[0].LongEdge)
	if err != nil {
		return nil, err
	}
	return EncodePresets(ctx, src, opt)
}

func (o ImageOptions) withDefaults() ImageOptions {
	if o.Codec == "" {
		o.Codec = flex.CodecHEIC
	}
	if o.Quality <= 0 || o.Quality > 100 {
		o.Quality = defaultImageQuality
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = limits.DefaultMaxPixels
	}
	if o.HEICPreset == "" {
		o.HEICPreset = DefaultHEICPreset
	}
	if o.HEICTune == "" {
		o.HEICTune = DefaultHEICTune
	}
	if o.HEICX265 == nil {
		o.HEICX265 = DefaultHEICX265
	}
	if o.HEICThumbJPEG == 0 {
		o.HEICThumbJPEG = DefaultHEICThumbJPEG
	}
	return o
}

// DecodeImage checks the header of data and decodes it upright (EXIF
// orientation of JPEG input applied, HEIF transformations applied). The
// error contract is that of mediaheader.Check plus ErrCorrupt for bad pixel data.
func DecodeImage(data []byte, maxPixels int64) (image.Image, error) {
	return decode(data, maxPixels, 0)
}

// decode is DecodeImage that may shrink a JPEG while decoding (libjpeg-turbo
// DCT scaling) as long as its long edge stays at least target pixels.
func decode(data []byte, maxPixels int64, target int) (image.Image, error) {
	if maxPixels <= 0 {
		maxPixels = limits.DefaultMaxPixels
	}
	f, _, _, err := mediaheader.Check(bytes.NewReader(data), maxPixels)
	if err != nil {
		return nil, err
	}
	switch f {
	case mediaheader.FormatHEIC:
		return decodeHEIC(data, maxPixels)
	case mediaheader.FormatPNG:
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("png: %v: %w", err, ErrCorrupt)
		}
		return img, nil
	default:
		img, err := decodeJPEGScaled(data, target)
		if errors.Is(err, errUseGo) {
			var gi image.Image
			gi, err = jpeg.Decode(bytes.NewReader(data))
			if err != nil {
				return nil, fmt.Errorf("jpeg: %v: %w", err, ErrCorrupt)
			}
			return orient(gi, jpegOrientation(data)), nil
		}
		if err != nil {
			return nil, err
		}
		return orient(img, jpegOrientation(data)), nil
	}
}

// EncodePresets resizes an upright image to every preset and encodes each.
func EncodePresets(ctx context.Context, src image.Image, opt ImageOptions) ([]Output, error) {
	opt = opt.withDefaults()
	outs := make([]Output, 0, len(Presets))
	for i, r := range Renditions(src) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("compress image: %w", err)
		}
		ro := opt
		if opt.Codec == flex.CodecHEIC && Presets[i].Name == media.VariantThumb && opt.HEICThumbJPEG > 0 {
			ro.Codec, ro.Quality = flex.CodecJPEG, opt.HEICThumbJPEG
		}
		o, err := Encode(r, Presets[i].Name, ro)
		if err != nil {
			return nil, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// Renditions returns src resized to every preset, in the order of Presets,
// as opaque NRGBA images: exactly what EncodePresets encodes (the benchmark
// measures SSIM against them). Each preset is resized from the previous one.
func Renditions(src image.Image) []*image.NRGBA {
	out := make([]*image.NRGBA, 0, len(Presets))
	cur := src
	for _, p := range Presets {
		cur = fit(cur, p.LongEdge)
		n := toNRGBA(cur)
		cur = n
		out = append(out, n)
	}
	return out
}

// Fit returns the size of a w x h image fitted into long edge, never larger
// than the original.
func Fit(w, h, long int) (int, int) {
	if w <= long && h <= long {
		return w, h
	}
	if w >= h {
		nh := max(1, (h*long+w/2)/w)
		return long, nh
	}
	nw := max(1, (w*long+h/2)/h)
	return nw, long
}

func fit(img image.Image, long int) image.Image {
	b := img.Bounds()
	w, h := Fit(b.Dx(), b.Dy(), long)
	if w == b.Dx() && h == b.Dy() {
		return img
	}
	// imaging widens the filter support by the scale factor, so Linear is a
	// proper area filter when shrinking; it costs a third of Lanczos.
	return imaging.Resize(img, w, h, imaging.Linear)
}

// orient applies EXIF orientation o (1..8) so the image is upright.
func orient(img image.Image, o int) image.Image {
	switch o {
	case 2:
		return imaging.FlipH(img)
	case 3:
		return imaging.Rotate180(img)
	case 4:
		return imaging.FlipV(img)
	case 5:
		return imaging.Transpose(img)
	case 6:
		return imaging.Rotate270(img)
	case 7:
		return imaging.Transverse(img)
	case 8:
		return imaging.Rotate90(img)
	}
	return img
}

// toNRGBA returns img as an opaque *image.NRGBA (transparent pixels are
// flattened onto white), reusing it when it already is one and opaque.
func toNRGBA(img image.Image) *image.NRGBA {
	n, ok := img.(*image.NRGBA)
	if !ok || n.Rect.Min != (image.Point{}) {
		b := img.Bounds()
		n = image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(n, n.Rect, img, b.Min, draw.Src)
	}
	if n.Opaque() {
		return n
	}
	for i := 0; i+3 < len(n.Pix); i += 4 {
		a := uint32(n.Pix[i+3])
		if a == 255 {
			continue
		}
		for c := 0; c < 3; c++ {
			n.Pix[i+c] = uint8((uint32(n.Pix[i+c])*a + 255*(255-a) + 127) / 255)
		}
		n.Pix[i+3] = 255
	}
	return n
}

// Encode encodes one opaque rendition as variant name with opt's codec and
// quality (no resizing, no metadata).
func Encode(img *image.NRGBA, name string, opt ImageOptions) (Output, error) {
	opt = opt.withDefaults()
	w, h := img.Rect.Dx(), img.Rect.Dy()
	switch opt.Codec {
	case flex.CodecJPEG:
		// libjpeg-turbo (SIMD, optimized Huffman tables): see
		// BenchmarkJPEGEncode for its CPU and bytes against image/jpeg.
		b, err := encodeJPEG(img, opt.Quality)
		if err != nil {
			return Output{}, fmt.Errorf("encode jpeg: %w", err)
		}
		return newOutput(name, string(flex.CodecJPEG), opt.Quality, w, h, "image/jpeg", b), nil
	case flex.CodecHEIC:
		b, err := encodeHEIC(img, opt.Quality, opt.HEICPreset, opt.HEICTune, opt.HEICX265)
		if err != nil {
			return Output{}, fmt.Errorf("encode heic: %w", err)
		}
		return newOutput(name, string(flex.CodecHEIC), opt.Quality, w, h, "image/heic", b), nil
	}
	return Output{}, fmt.Errorf("unknown image codec %q", opt.Codec)
}
