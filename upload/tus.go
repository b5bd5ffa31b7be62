package upload

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"willow/internal/iostat"
)

// tus 1.0.0 (https://tus.io/protocols/resumable-upload): POST creates an
// upload (optionally with its first bytes), HEAD reports its offset, PATCH
// appends at the offset, DELETE terminates it. Upload-Metadata carries
// filename, filetype (the content type), business, upload_id (the client's
// upload ID: the same one twice gives the same media), and optionally kind
// (image|video) and sha256 (hex, verified at commit). An upload is
// committed by the request that brings its offset to its length; tus
// clients take offset == length as the acknowledgement, so it is never
// reported before the commit made the bytes durable.

const (
	tusContentType = "application/offset+octet-stream"
	// maxMetadataBytes bounds Upload-Metadata.
	maxMetadataBytes = 4 << 10
)

// parseMetadata decodes Upload-Metadata: comma-separated "key base64" pairs
// (the value may be omitted).
func parseMetadata(v string) (map[string]string, error) {
	md := map[string]string{}
	if strings.TrimSpace(v) == "" {
		return md, nil
	}
	if len(v) > maxMetadataBytes {
		return nil, fail(ReasonBadMetadata, "Upload-Metadata over %d bytes", maxMetadataBytes)
	}
	for _, pair := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(pair), " ")
		if k == "" {
			return nil, fail(ReasonBadMetadata, "Upload-Metadata has an empty key")
		}
		if _, dup := md[k]; dup {
			return nil, fail(ReasonBadMetadata, "Upload-Metadata key %q given twice", k)
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val))
		if err != nil {
			return nil, fail(ReasonBadMetadata, "Upload-Metadata value of %q is not base64", k)
		}
		md[k] = string(b)
	}
	return md, nil
}

// encodeMetadata is the Upload-Metadata of an upload, for HEAD.
func encodeMetadata(m SessionMeta) string {
	kv := map[string]string{"filename": m.Filename, "filetype": m.ContentType, "business": m.Business, "upload_id": m.UploadID}
	keys := make([]string, 0, len(kv))
	for k, v := range kv {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+base64.StdEncoding.EncodeToString([]byte(kv[k])))
	}
	return strings.Join(parts, ",")
}

func first(md map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := md[k]; v != "" {
			return v
		}
	}
	return ""
}

// tusCreate answers POST to the collection (creation,
// creation-with-upload).
func (h *HTTP) tusCreate(w http.ResponseWriter, r *http.Request, p protocol) {
	if r.Header.Get("Upload-Defer-Length") != "" {
		h.fail(w, p, fail(ReasonLengthRequired, "Upload-Defer-Length is not supported: send Upload-Length"))
		return
	}
	if r.Header.Get("Upload-Concat") != "" {
		h.fail(w, p, fail(ReasonConcatUnsupported, "the concatenation extension is not supported"))
		return
	}
	size, ok := parseSFInt(r.Header.Get("Upload-Length"))
	if !ok {
		h.fail(w, p, fail(ReasonLengthRequired, "Upload-Length must be a non-negative integer"))
		return
	}
	c, tok, err := h.claims(r, RouteCreate)
	if err != nil {
		h.fail(w, p, err)
		return
	}
	md, err := parseMetadata(r.Header.Get("Upload-Metadata"))
	if err != nil {
		h.fail(w, p, err)
		return
	}
	ct := first(md, "filetype", "content_type", "contentType", "type")
	bp := BeginParams{
		UploadID: first(md, "upload_id", "uploadId"), Token: tok, User: c.User,
		Business: first(md, "business"), Size: size, SHA256: md["sha256"],
		ContentType: ct, Filename: first(md, "filename", "name"),
		Kind: kindFor(md["kind"], ct),
	}
	ss, release, ok := h.begin(w, r, p, c, bp)
	defer release()
	if !ok {
		return
	}
	if ss.Committed != nil {
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Size, 10))
		setOutcome(w, ss.Committed)
		w.WriteHeader(http.StatusCreated)
		return
	}
	w.Header().Set("Upload-Expires", ss.Expires.UTC().Format(http.TimeFormat))
	if r.ContentLength == 0 || (r.ContentLength < 0 && r.Header.Get("Content-Type") != tusContentType) {
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Offset, 10))
		w.WriteHeader(http.StatusCreated)
		return
	}
	if r.Header.Get("Content-Type") != tusContentType {
		h.fail(w, p, fail(ReasonBadContentType, "creation-with-upload needs Content-Type: %s", tusContentType))
		return
	}
	// The body starts at offset 0; bytes already staged by an earlier
	// creation of the same upload ID must be identical.
	h.tusReceive(w, r, p, ss.Key, c.User, 0, false, http.StatusCreated)
}

// tusPatch answers PATCH of an upload (core).
func (h *HTTP) tusPatch(w http.ResponseWriter, r *http.Request, p protocol, key string) {
	if off, user, ok := h.appendRequest(w, r, p, tusContentType); ok {
		h.tusReceive(w, r, p, key, user, off, true, http.StatusNoContent)
	}
}

// tusReceive reads the body into upload key of user from off (verifying
// Upload-Checksum when sent), commits once the offset reaches the length
// and answers with code. strict: off must be the upload's offset (PATCH);
// otherwise it may be lower, the bytes already staged being identical
// (creation-with-upload of an upload ID begun before).
func (h *HTTP) tusReceive(w http.ResponseWriter, r *http.Request, p protocol, key, user string, off int64, strict bool, code int) {
	var verify func() (hash.Hash, []byte, error)
	if v := r.Header.Get("Upload-Checksum"); v != "" {
		algo, sum, _ := strings.Cut(strings.TrimSpace(v), " ")
		want, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sum))
		var hf hash.Hash
		switch algo {
		case "sha1":
			hf = sha1.New()
		case "sha256":
			hf = sha256.New()
		default:
			h.writeErr(w, p, http.StatusBadRequest, "bad_checksum_algorithm", "Upload-Checksum algorithm must be sha1 or sha256", 0)
			return
		}
		if err != nil || len(want) != hf.Size() {
			h.writeErr(w, p, http.StatusBadRequest, "bad_checksum", "Upload-Checksum must be ALGORITHM BASE64-DIGEST", 0)
			return
		}
		verify = func() (hash.Hash, []byte, error) { return hf, want, nil }
	}
	st, ss, release, ok := h.takeSession(w, r, p, key, user)
	if !ok {
		return
	}
	defer release()
	if st == nil || ss.Committed != nil {
		// Replay the final answer: the upload is complete.
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Size, 10))
		if ss.Committed != nil {
			setOutcome(w, ss.Committed)
		}
		w.WriteHeader(code)
		return
	}
	if off > ss.Offset || (strict && off != ss.Offset) {
		w.Header().Set("Upload-Offset", strconv.FormatInt(ss.Offset, 10))
		h.writeErr(w, p, http.StatusConflict, "offset_mismatch",
			"Upload-Offset "+strconv.FormatInt(off, 10)+" is not the upload's offset "+strconv.FormatInt(ss.Offset, 10), 0)
		return
	}
	me := h.current(key)
	var durable int64
	var err error
	if verify != nil {
		durable, err = h.receiveChecked(r, st, off, me, verify)
	} else {
		durable, _, err = h.receive(r, st, off, me, true, nil)
	}
	if err != nil {
		h.fail(w, p, err)
		return
	}
	if durable == ss.Size {
		o, err := h.s.commitSession(r.Context(), key, false)
		if err != nil {
			h.fail(w, p, err)
			return
		}
		setOutcome(w, &o)
	}
	w.Header().Set("Upload-Offset", strconv.FormatInt(durable, 10))
	w.WriteHeader(code)
}

// receiveChecked spools the body to a temporary file while hashing it and
// appends it only when its digest matches Upload-Checksum: a body that
// breaks off or does not match adds nothing (460 checksum_mismatch).
func (h *HTTP) receiveChecked(r *http.Request, st *staged, off int64, me *inflight, verify func() (hash.Hash, []byte, error)) (int64, error) {
	hf, want, _ := verify()
	f, err := os.CreateTemp(h.s.upDir, ".patch-*")
	if err != nil {
		return 0, errInternal(err)
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	limit := st.meta.Size - off
	n, err := io.Copy(io.MultiWriter(iostat.CountWriter(f), hf), io.LimitReader(h.body(r, me), limit+1))
	h.m.body.Add(float64(n))
	if err != nil {
		_, d := st.Offsets()
		return d, fail(ReasonBodyIncomplete, "the body broke off after %d bytes; a checksummed request is applied whole or not at all", n)
	}
	if n > limit {
		return 0, fail(ReasonChunkOutOfRange, "the body runs past the upload's length of %d bytes", st.meta.Size)
	}
	if got := hf.Sum(nil); !bytes.Equal(got, want) {
		_, d := st.Offsets()
		return d, fail(ReasonChecksumMismatch, "Upload-Checksum %s does not match the %d bytes received; nothing was kept",
			base64.StdEncoding.EncodeToString(want), n)
	}
	bp := httpBufs.Get().(*[]byte)
	defer httpBufs.Put(bp)
	buf := *bp
	for pos := int64(0); pos < n; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), n-pos)], pos)
		if k == 0 && err != nil {
			return 0, errInternal(err)
		}
		if err := h.s.writeSession(st, off+pos, buf[:k]); err != nil {
			_, _ = st.Sync()
			return 0, err
		}
		pos += int64(k)
	}
	d, err := st.Sync()
	if err != nil {
		return d, errInternal(err)
	}
	return d, nil
}
