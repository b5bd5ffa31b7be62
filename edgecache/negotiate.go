package edgecache

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"strconv"
	"strings"

	"willow/compress"
	"willow/flex"
	"willow/media"
	"willow/shedding"
)

// Representations of an image variant. HEIC is what compress stores
// normally; browsers other than Safari cannot show it, so a client that
// does not say it accepts HEIF gets a JPEG the edge makes from it, once
// per OC (by the ring owner), cached as its own entry (base@jpeg) in
// memory and on disk. Variants compress stored as JPEG (the flex path)
// are served as they are to everyone.
const (
	FormatHEIC = "heic"
	FormatJPEG = "jpeg"
)

// negotiable reports whether a variant has more than one representation:
// the image presets. The raw is the uploaded file as it was, and the
// video and poster are MP4 and JPEG already.
func negotiable(variant string) bool {
	switch variant {
	case media.VariantThumb, media.VariantMedium, media.VariantLarge:
		return true
	}
	return false
}

// pickFormat chooses the representation for an HTTP request: ?format=
// when given (FormatHEIC or FormatJPEG, else ErrBadFormat); else HEIC
// when Accept names image/heic or image/heif with a non-zero q, or when
// there is no Accept header at all (RFC 9110: any type is acceptable);
// else JPEG.
func pickFormat(param string, accept []string) (string, error) {
	switch strings.ToLower(param) {
	case FormatHEIC, "heif":
		return FormatHEIC, nil
	case FormatJPEG, "jpg":
		return FormatJPEG, nil
	case "":
	default:
		return "", fmt.Errorf("%w %q: want heic or jpeg", ErrBadFormat, param)
	}
	if accept == nil || acceptsHEIF(strings.Join(accept, ",")) {
		return FormatHEIC, nil
	}
	return FormatJPEG, nil
}

// acceptsHEIF reports whether an Accept header names image/heic or
// image/heif (wildcards do not count: every browser sends image/*).
func acceptsHEIF(accept string) bool {
	for _, r := range strings.Split(accept, ",") {
		typ, params, _ := strings.Cut(strings.TrimSpace(r), ";")
		typ = strings.ToLower(strings.TrimSpace(typ))
		if typ != "image/heic" && typ != "image/heif" {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		if q > 0 {
			return true
		}
	}
	return false
}

// isHEIF reports whether a content type is HEIC or HEIF.
func isHEIF(ct string) bool {
	ct = strings.ToLower(ct)
	return strings.HasPrefix(ct, "image/heic") || strings.HasPrefix(ct, "image/heif")
}

// find returns the representation r asks for and its tier: the
// stored one (filled on a miss), then its format (lookup, represent).
func (s *Server) find(ctx context.Context, r req) (*object, string, error) {
	o, tier, err := s.lookup(ctx, r)
	if err != nil {
		return nil, "", err
	}
	return s.represent(ctx, r, o, tier)
}

// represent returns the representation of r (its format) whose stored
// representation is o: o itself, or its JPEG fallback.
func (s *Server) represent(ctx context.Context, r req, o *object, tier string) (*object, string, error) {
	if !r.wantsJPEGOf(o) || o.sliced {
		return o, tier, nil
	}
	return s.representJPEG(ctx, r, o, tier)
}

// wantsJPEGOf says r asks for the JPEG fallback of stored o (a HEIF).
func (r req) wantsJPEGOf(o *object) bool {
	return r.format == FormatJPEG && negotiable(r.variant) && isHEIF(o.contentType)
}

// jpegKey is the cache key of r's JPEG fallback.
func (r req) jpegKey() string { return r.base() + "@jpeg" }

func (s *Server) representJPEG(ctx context.Context, r req, o *object, tier string) (*object, string, error) {
	owner, owned := s.owner(r)
	return s.resolve(ctx, r.jpegKey(), owned, func(ctx context.Context) (found, error) {
		if !owned && !s.peerDown(owner) {
			p, err := s.fetchPeer(shedding.WithRequest(ctx, r.who.business, r.who.user), owner, r, FormatJPEG, 0, 0)
			if err == nil {
				j := &object{data: p.data, size: int64(len(p.data)), contentType: p.contentType, etag: p.etag, modTime: p.modTime}
				s.keep(r.jpegKey(), j, false)
				return found{j, tierPeer}, nil
			}
			s.log.Warn("owner peer failed, making the JPEG here", "owner", owner, "key", r.base(), "err", err)
			s.markDown(owner)
		}
		j, err := s.transcode(ctx, o)
		if err != nil {
			// Not cached: the next request tries again.
			s.log.Warn("JPEG fallback failed, serving the stored representation", "key", r.base(), "err", err)
			return found{o, tier}, nil
		}
		s.keep(r.jpegKey(), j, owned)
		return found{j, tierOrigin}, nil
	})
}

// transcode makes the JPEG fallback of a HEIC object at
// Config.FallbackJPEGQuality, at most Config.Transcoders at a time.
func (s *Server) transcode(ctx context.Context, o *object) (*object, error) {
	select {
	case s.transcoders <- struct{}{}:
		defer func() { <-s.transcoders }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	data, err := jpegFallback(o.data, s.cfg.MaxTranscodePixels, s.cfg.FallbackJPEGQuality)
	if err != nil {
		s.m.transcodes.WithLabelValues("error").Inc()
		return nil, err
	}
	s.m.transcodes.WithLabelValues("ok").Inc()
	return &object{data: data, size: int64(len(data)), contentType: "image/jpeg", etag: etagOf(data), modTime: o.modTime}, nil
}

// jpegFallback decodes a HEIC image (at most maxPixels) and encodes it as
// a JPEG at quality, the same size, without metadata.
func jpegFallback(heic []byte, maxPixels int64, quality int) ([]byte, error) {
	img, err := compress.DecodeImage(heic, maxPixels)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	out, err := compress.Encode(opaqueNRGBA(img), "", compress.ImageOptions{Codec: flex.CodecJPEG, Quality: quality})
	if err != nil {
		return nil, err
	}
	return out.Data, nil
}

// opaqueNRGBA returns img as an opaque NRGBA at the origin, over white
// where it is transparent (JPEG has no alpha).
func opaqueNRGBA(img image.Image) *image.NRGBA {
	if n, ok := img.(*image.NRGBA); ok && n.Rect.Min == (image.Point{}) && n.Opaque() {
		return n
	}
	b := img.Bounds()
	n := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(n, n.Rect, image.NewUniform(color.White), image.Point{}, draw.Src)
	draw.Draw(n, n.Rect, img, b.Min, draw.Over)
	return n
}
