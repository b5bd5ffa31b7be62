package upload

import (
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
)

// IETF "Resumable Uploads for HTTP" (draft-ietf-httpbis-resumable-upload,
// interop versions IETFInteropURLSession to IETFInteropVersion, chosen by
// the request's Upload-Draft-Interop-Version). A POST to the collection
// with Upload-Complete creates an upload resource, announced at once in a
// 104 (Upload Resumption Supported) interim response with its Location and
// Upload-Limit; HEAD of the resource gives Upload-Offset and
// Upload-Complete; PATCH with Content-Type application/partial-upload
// appends at Upload-Offset; DELETE cancels. While a body is read a 104
// reports each newly durable offset. The request whose Upload-Complete is
// ?1 and whose body completes the length commits, and its final response
// (200, Upload-Complete: ?1, a JSON body) names the media.
//
// The length must be known at creation (Upload-Length, or Content-Length
// with Upload-Complete: ?1). The business and the client's upload ID come
// from the Willow-Business and Willow-Upload-Id headers (default: the
// token's business, a fresh ID), the content type from Content-Type, the
// file name from Content-Disposition.

const (
	// statusUploadResumption is 104 (Upload Resumption Supported).
	statusUploadResumption = 104
	partialUploadType      = "application/partial-upload"
	problemMismatch        = "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
	problemLength          = "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"
)

func writeProblem(w http.ResponseWriter, code int, typ, title string, extra map[string]any) {
	body := map[string]any{"type": typ, "title": title}
	for k, v := range extra {
		body[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// ietfCreate answers an upload creation: POST to the collection.
func (h *HTTP) ietfCreate(w http.ResponseWriter, r *http.Request, p protocol) {
	complete, ok := parseSFBool(r.Header.Get("Upload-Complete"))
	if !ok {
		h.fail(w, p, fail(ReasonBadUploadComplete, "an upload creation needs Upload-Complete: ?0 or ?1"))
		return
	}
	size, haveLen := parseSFInt(r.Header.Get("Upload-Length"))
	if complete && r.ContentLength >= 0 {
		if haveLen && size != r.ContentLength {
			w.Header().Set("Upload-Complete", "?0")
			writeProblem(w, http.StatusBadRequest, problemLength, "Upload-Length and Content-Length differ", nil)
			return
		}
		size, haveLen = r.ContentLength, true
	}
	if !haveLen {
		h.fail(w, p, fail(ReasonLengthRequired, "send Upload-Length (or Content-Length with Upload-Complete: ?1)"))
		return
	}
	c, tok, err := h.claims(r, RouteCreate)
	if err != nil {
		h.fail(w, p, err)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == partialUploadType || ct == "application/octet-stream" {
		ct = ""
	}
	var filename string
	if _, params, err := mime.ParseMediaType(r.Header.Get("Content-Disposition")); err == nil {
		filename = params["filename"]
	}
	bp := BeginParams{
		UploadID: r.Header.Get(HeaderUploadID), Token: tok, User: c.User, Business: r.Header.Get(HeaderBusiness),
		Size: size, ContentType: ct, Filename: filename, Kind: kindFor("", ct),
	}
	ss, release, ok := h.begin(w, r, p, c, bp)
	defer release()
	if !ok {
		return
	}
	if ss.Committed == nil {
		// Announce the upload resource before reading the body, so the
		// client can resume whatever happens to this request.
		w.Header().Set("Upload-Draft-Interop-Version", strconv.Itoa(p.interop))
		w.Header().Set("Upload-Limit", h.limits(p, ss.Size, ss.Expires))
		w.WriteHeader(statusUploadResumption)
	}
	h.ietfReceive(w, r, p, ss.Key, c.User, 0, complete, false, http.StatusCreated)
}

// ietfAppend answers an upload append: PATCH of the upload resource.
func (h *HTTP) ietfAppend(w http.ResponseWriter, r *http.Request, p protocol, key string) {
	off, user, ok := h.appendRequest(w, r, p, partialUploadType)
	if !ok {
		return
	}
	complete, ok := parseSFBool(r.Header.Get("Upload-Complete"))
	if !ok {
		h.fail(w, p, fail(ReasonBadUploadComplete, "an upload append needs Upload-Complete: ?0 or ?1"))
		return
	}
	h.ietfReceive(w, r, p, key, user, off, complete, true, http.StatusNoContent)
}

// ietfReceive reads the body into upload key of user from off and, when
// complete and the length is reached, commits. strict: off must be the
// upload's offset (append); a creation's body starts at 0 and may repeat
// identical staged bytes.
func (h *HTTP) ietfReceive(w http.ResponseWriter, r *http.Request, p protocol, key, user string, off int64, complete, strict bool, code int) {
	st, ss, release, ok := h.takeSession(w, r, p, key, user)
	if !ok {
		return
	}
	defer release()
	if st == nil || ss.Committed != nil {
		// The upload is complete: replay its final response.
		w.Header().Set("Upload-Complete", "?1")
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Size, 10))
		writeOutcome(w, http.StatusOK, ss.Committed, ss.Size)
		return
	}
	if l, ok := parseSFInt(r.Header.Get("Upload-Length")); ok && l != ss.Size {
		w.Header().Set("Upload-Complete", "?0")
		writeProblem(w, http.StatusBadRequest, problemLength, "Upload-Length differs from the upload's length", nil)
		return
	}
	if off > ss.Offset || (strict && off != ss.Offset) {
		w.Header().Set("Upload-Complete", "?0")
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Offset, 10))
		writeProblem(w, http.StatusConflict, problemMismatch, "offset from request does not match offset of resource",
			map[string]any{"expected-offset": ss.Offset, "provided-offset": off})
		return
	}
	if complete && r.ContentLength >= 0 && off+r.ContentLength != ss.Size {
		w.Header().Set("Upload-Complete", "?0")
		writeProblem(w, http.StatusBadRequest, problemLength, "the request completes the upload but its content does not end at the upload's length", nil)
		return
	}
	progress := func(d int64) {
		w.Header().Set("Upload-Offset", strconv.FormatInt(d, 10))
		w.WriteHeader(statusUploadResumption)
	}
	durable, whole, err := h.receive(r, st, off, h.current(key), complete, progress)
	w.Header().Set("Upload-Offset", strconv.FormatInt(durable, 10))
	if err != nil {
		w.Header().Set("Upload-Complete", "?0")
		h.fail(w, p, err)
		return
	}
	if complete && whole {
		if durable != ss.Size {
			w.Header().Set("Upload-Complete", "?0")
			writeProblem(w, http.StatusBadRequest, problemLength, "the upload was marked complete short of its length", nil)
			return
		}
		o, err := h.s.commitSession(r.Context(), key, true)
		if err != nil {
			// A server-side failure leaves the upload resumable (HEAD, then
			// an empty PATCH with Upload-Complete: ?1); a rejection of the
			// representation ends it.
			code, _, _, _ := httpStatus(err)
			w.Header().Set("Upload-Complete", sfBool(code < 500))
			h.fail(w, p, err)
			return
		}
		w.Header().Set("Upload-Complete", "?1")
		writeOutcome(w, http.StatusOK, &o, ss.Size)
		return
	}
	w.Header().Set("Upload-Complete", "?0")
	w.Header().Set("Upload-Limit", h.limits(p, ss.Size, ss.Expires))
	w.WriteHeader(code)
}
