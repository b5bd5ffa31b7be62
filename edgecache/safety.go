package edgecache

import (
	"net/http"
	"strings"

	"willow/mediaheader"
)

// Headers of content safety.
const (
	cacheControlPrivate = "private, max-age=31536000, immutable"
	octetStream         = "application/octet-stream"
)

// contentType returns the content type an object is served with: the one
// its bytes are (mediaheader.Sniff), never what the store or a client
// claims, and application/octet-stream for anything that is not a media
// format (an HTML page, a script), so no browser renders it as a page.
func contentType(_ string, data []byte) string {
	if t, ok := mediaheader.Sniff(data[:min(len(data), mediaheader.SniffBytes)]); ok {
		return t.ContentType
	}
	return octetStream
}

var nosniffValue = []string{"nosniff"} // shared, read-only

// nosniff sets X-Content-Type-Options: nosniff on every response of h,
// errors included.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Content-Type-Options"] = nosniffValue
		h.ServeHTTP(w, r)
	})
}

// attachment reports whether content of type ct is served as an
// attachment: anything but an image or a video.
func attachment(ct string) bool {
	return !strings.HasPrefix(ct, "image/") && !strings.HasPrefix(ct, "video/")
}

// safeHeaders sets the headers of a served object: anything but an image
// or a video is an attachment, never displayed inline; a download a
// signature let through is private to its caller (shared caches would
// serve it to anyone).
func safeHeaders(h http.Header, ct string, signed bool) {
	if attachment(ct) {
		h.Set("Content-Disposition", "attachment")
	}
	if signed {
		h.Set("Cache-Control", cacheControlPrivate)
	}
}
