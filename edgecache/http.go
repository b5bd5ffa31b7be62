package edgecache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"willow/flex"
	"willow/limits"
	"willow/media"
	"willow/rpcstatus"
	"willow/shedding"
	"willow/urlsign"
)

// HTTP headers and query parameters naming the caller.
const (
	HeaderBusiness = "Willow-Business"
	HeaderUser     = "Willow-User"
	cacheControl   = "public, max-age=31536000, immutable"
)

// serveHTTP serves GET and HEAD /m/{id}/{variant}: every request the hit
// path (hitpath.go) does not answer itself.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSONError(w, http.StatusMethodNotAllowed, "method", "only GET and HEAD")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/m/")
	if !ok {
		writeJSONError(w, http.StatusNotFound, rpcstatus.ReasonNotFound, "no such path; want /m/{id}/{variant}")
		return
	}
	var q url.Values
	if r.URL.RawQuery != "" {
		q = r.URL.Query()
	}
	rq, signed, err := s.prepare(r.Context(), download{
		rest: rest, query: q, accept: r.Header.Values("Accept"),
		business: r.Header.Get(HeaderBusiness), user: r.Header.Get(HeaderUser),
	})
	if err == nil && !admittedByHitPath(r.Context()) {
		err = s.admit(rq.who.business, rq.who.user)
	}
	var o *object
	var tier string
	if err == nil {
		o, tier, err = s.find(r.Context(), rq)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.m.hit(tier)
	h := w.Header()
	oh := o.headers()
	h["Content-Type"] = oh.contentType
	h["Etag"] = oh.etag
	h["Cache-Control"] = cacheControlValue
	safeHeaders(h, o.contentType, signed)
	if negotiable(rq.variant) {
		h["Vary"] = varyAccept
	}
	if !o.sliced && r.Header.Get("Range") == "" && r.Header.Get("If-None-Match") == "" &&
		r.Header.Get("If-Match") == "" && r.Header.Get("If-Modified-Since") == "" && r.Header.Get("If-Unmodified-Since") == "" {
		// The common case, without ServeContent's copy through a buffer:
		// one write of the cached bytes.
		h["Accept-Ranges"] = acceptRangesBytes
		h["Content-Length"] = oh.contentLength
		if oh.lastModified != nil {
			h["Last-Modified"] = oh.lastModified
		}
		if r.Method == http.MethodHead {
			return
		}
		var n int64
		if f, ok := s.diskFile(rq, o, time.Now()); ok {
			// Held by the disk tier: sendfile from the page cache, not a
			// copy of the memory tier's bytes into the socket.
			n = sendBody(w, r, o.data, f)
		} else {
			m, _ := w.Write(o.data)
			n = int64(m)
		}
		s.m.bytesHTTP.Add(float64(n))
		return
	}
	// Range, conditional requests and sliced objects: ServeContent reads
	// only the slices the range covers.
	cw := countingWriter{ResponseWriter: w}
	http.ServeContent(&cw, r, "", o.modTime, s.open(r.Context(), rq, o, rangeEnd(r.Header.Get("Range"), o.size)))
	s.m.bytesHTTP.Add(float64(cw.n))
}

// download is what the answer to an HTTP download depends on, as both
// HTTP paths (serveHTTP, the hit path) read it from a request.
type download struct {
	rest           string     // ID/VARIANT: the path after /m/
	query          url.Values // nil without a query string
	accept         []string   // the Accept header's values
	business, user string     // the Willow-Business and Willow-User headers
}

// prepare checks a download's signature, ID, variant and format, and
// names its caller (business and user: headers, else query ?b= and ?u=;
// the signed user when signed). It changes nothing, so a request the hit
// path gives up on is prepared again by serveHTTP. signed reports that a
// signature let it through. Errors: ErrBadRequest, ErrBadFormat,
// ErrForbidden and those of authorize.
func (s *Server) prepare(ctx context.Context, d download) (rq req, signed bool, err error) {
	idStr, variant, ok := strings.Cut(d.rest, "/")
	if !ok || strings.Contains(variant, "/") {
		return req{}, false, fmt.Errorf("%w: want /m/{id}/{variant}", ErrBadRequest)
	}
	sig := urlsign.FromQuery(d.query)
	if signed, err = s.authorize(ctx, idStr, variant, sig); err != nil {
		return req{}, false, err
	}
	business, user := d.business, d.user
	if business == "" {
		business = d.query.Get("b")
	}
	if user == "" {
		user = d.query.Get("u")
	}
	if business == "" {
		business = flex.DefaultBusiness
	}
	if sig.User != "" {
		user = sig.User // who the URL was signed for
	}
	id, err := parseReq(idStr, variant)
	if err != nil {
		return req{}, false, err
	}
	format, err := pickFormat(d.query.Get("format"), d.accept)
	if err != nil {
		return req{}, false, err
	}
	return req{id: id, idStr: idStr, variant: variant, format: format, who: caller{business, user}, key: d.rest}, signed, nil
}

// diskFile returns the disk tier's file of the object o a hit for rq
// resolved to, when the tier holds it and it is large enough to be worth
// a sendfile (Config.SendfileMinBytes).
// now is the request's time, for the tier's recency.
func (s *Server) diskFile(rq req, o *object, now time.Time) (*entryFile, bool) {
	if s.disk == nil || int64(len(o.data)) < s.cfg.SendfileMinBytes {
		return nil, false
	}
	if rq.format == FormatJPEG && o.contentType == "image/jpeg" {
		if f, ok := s.disk.open(rq.jpegKey(), o, now); ok {
			return f, true
		}
	}
	return s.disk.open(rq.base(), o, now)
}

// countingWriter counts body bytes written.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// writeError is the one place errors become HTTP statuses.
func writeError(w http.ResponseWriter, err error) {
	code, reason := http.StatusInternalServerError, rpcstatus.ReasonInternal
	switch {
	case errors.Is(err, ErrBadFormat):
		code, reason = http.StatusBadRequest, ReasonBadFormat
	case errors.Is(err, ErrBadRequest):
		code, reason = http.StatusBadRequest, ReasonBadID
	case errors.Is(err, ErrFailed):
		code, reason = http.StatusUnprocessableEntity, ReasonFailed
		var fe *FailedError
		if errors.As(err, &fe) && fe.Reason != "" {
			reason = fe.Reason
		}
	case errors.Is(err, ErrProcessing):
		code, reason = http.StatusNotFound, media.ReasonProcessing
	case errors.Is(err, ErrNotFound):
		code, reason = http.StatusNotFound, rpcstatus.ReasonNotFound
	case errors.Is(err, ErrForbidden):
		code, reason = http.StatusForbidden, forbiddenReason(err)
	case errors.Is(err, ErrShed):
		w.Header().Set("Retry-After", strconv.Itoa(int(DefaultRetryAfter/time.Second)))
		code, reason = http.StatusTooManyRequests, shedding.ReasonShedRatio
	case errors.Is(err, ErrOverload):
		w.Header().Set("Retry-After", strconv.Itoa(int(DefaultRetryAfter/time.Second)))
		code, reason = http.StatusTooManyRequests, shedding.ReasonOverload
	case errors.Is(err, ErrTooLarge):
		code, reason = http.StatusBadGateway, limits.ReasonTooLarge
	case errors.Is(err, ErrOrigin), errors.Is(err, context.DeadlineExceeded):
		code, reason = http.StatusServiceUnavailable, ReasonOrigin
	case errors.Is(err, context.Canceled):
		code, reason = 499, rpcstatus.ReasonCanceled
	}
	writeJSONError(w, code, reason, err.Error())
}

func writeJSONError(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg, "reason": reason})
}
