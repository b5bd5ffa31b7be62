package edgecache

import (
	"context"
	"encoding/json"
	"errors"
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

// serveHTTP serves GET and HEAD /m/{id}/{variant}.
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
	idStr, variant, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(variant, "/") {
		writeJSONError(w, http.StatusBadRequest, ReasonBadID, "want /m/{id}/{variant}")
		return
	}
	var q url.Values
	if r.URL.RawQuery != "" {
		q = r.URL.Query()
	}
	sig := urlsign.FromQuery(q)
	signed, err := s.authorize(r.Context(), idStr, variant, sig)
	if err != nil {
		writeError(w, err)
		return
	}
	business := r.Header.Get(HeaderBusiness)
	if business == "" {
		business = q.Get("b")
	}
	user := r.Header.Get(HeaderUser)
	if user == "" {
		user = q.Get("u")
	}
	if business == "" {
		business = flex.DefaultBusiness
	}
	if sig.User != "" {
		user = sig.User // who the URL was signed for
	}
	if err := s.admit(business, user); err != nil {
		writeError(w, err)
		return
	}
	id, err := parseReq(idStr, variant)
	if err != nil {
		writeError(w, err)
		return
	}
	format, err := pickFormat(q.Get("format"), r.Header.Values("Accept"))
	if err != nil {
		writeError(w, err)
		return
	}
	rq := req{id: id, idStr: idStr, variant: variant, format: format, who: caller{business, user}, key: rest}
	o, tier, err := s.lookup(r.Context(), rq)
	if err == nil {
		o, tier, err = s.represent(r.Context(), rq, o, tier)
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
	if negotiable(variant) {
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
		if f, ok := s.diskFile(rq, o); ok {
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

// sendfileMin is the smallest object a hit sends from its disk-tier file;
// below it, opening the file costs more than the copy it saves.
const sendfileMin = 16 << 10

// diskFile returns the disk tier's file of the object o a hit for rq
// resolved to, when the tier holds it and it is large enough to be worth
// a sendfile.
func (s *Server) diskFile(rq req, o *object) (*entryFile, bool) {
	if s.disk == nil || len(o.data) < sendfileMin {
		return nil, false
	}
	if rq.format == FormatJPEG && o.contentType == "image/jpeg" {
		if f, ok := s.disk.open(rq.base()+"@jpeg", o); ok {
			return f, true
		}
	}
	return s.disk.open(rq.base(), o)
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
