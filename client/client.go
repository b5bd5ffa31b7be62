package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/shedding"
	"willow/urlsign"
)

// Defaults.
const (
	// ChunkSize is the size of upload chunks (the protocol allows 1 MiB).
	ChunkSize = 1 << 20
	// DefaultCallTimeout bounds one upload or download attempt.
	DefaultCallTimeout = 2 * time.Minute
)

// WithRequest returns ctx carrying business and user as outgoing gRPC
// metadata, read by the shedding interceptors (shedding.WithRequest).
func WithRequest(ctx context.Context, business, user string) context.Context {
	return shedding.WithRequest(ctx, business, user)
}

// WithToken returns ctx carrying tok as the call credential
// ("authorization: Bearer TOKEN", package auth) of every call made with
// it: the upload front checks it on Begin, Chunks, Status and Commit, the
// master on Route, the edge on Get.
func WithToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.MDAuthorization, "Bearer "+tok)
}

// AnonymousUser is the user Download asks Client.Token for when the
// context names none (WithRequest).
const AnonymousUser = "anonymous"

// hasToken reports whether ctx already carries a call credential.
func hasToken(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get(auth.MDAuthorization)) > 0
}

// Client uploads and downloads media through a Router.
type Client struct {
	// Router routes calls; required.
	Router *Router
	// Token returns an upload token for (user, business); required for
	// uploads.
	Token func(user, business string) (string, error)
	// CallTimeout bounds each attempt; default DefaultCallTimeout.
	CallTimeout time.Duration
	// URLKeys, when set, sign Download's requests for the user of the
	// request context (WithRequest), valid for URLTTL. Only tools holding
	// the deployment's keys set it (willow download); apps get signed URLs
	// from the timeline and use DownloadURL.
	URLKeys *urlsign.Keyring
	// URLTTL is how long Download's signatures are valid; default
	// DefaultURLTTL.
	URLTTL time.Duration
}

// DefaultURLTTL is how long a signature made by Download is valid.
const DefaultURLTTL = 10 * time.Minute

// UploadOptions describe one upload.
type UploadOptions struct {
	UploadID string // default: derived from the content's SHA-256
	User     string
	Business string
	Kind     willowv1.Kind // default: guessed from the file name
	Filename string
}

// UploadResult is what an acknowledged upload returns.
type UploadResult struct {
	ID        string              `json:"id"`
	Bytes     int64               `json:"bytes"`
	SHA256    string              `json:"sha256"`
	Region    string              `json:"region"`
	Location  string              `json:"location"`
	Duplicate bool                `json:"duplicate,omitempty"`
	Variants  []*willowv1.Variant `json:"variants"`
	// State is the media state when Commit answered: processing, ready or
	// failed; Reason and Error say why it failed.
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// SentBytes is how many bytes of the file were sent in all, over
	// every attempt: Bytes when nothing was resent, less when an earlier
	// upload of the same ID had sent some.
	SentBytes int64 `json:"sent_bytes"`
	// Fronts are the node IDs of the fronts tried, in order; the last
	// one committed.
	Fronts []string `json:"fronts,omitempty"`
}

// ErrMediaFailed is returned (wrapped, with the UploadResult) when the
// front acknowledged an upload but its bytes cannot be made into variants
// (state failed: undecodable, over a limit). Retrying does not help.
var ErrMediaFailed = errors.New("client: media failed")

// KindOf guesses the media kind from a file name.
func KindOf(name string) willowv1.Kind {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".mp4", ".mov", ".avi", ".mpeg", ".mpg", ".mkv", ".webm", ".m4v", ".3gp":
		return willowv1.Kind_KIND_VIDEO
	}
	return willowv1.Kind_KIND_IMAGE
}

// UploadFile uploads the file at path.
func (c *Client) UploadFile(ctx context.Context, path string, opts UploadOptions) (*UploadResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if opts.Filename == "" {
		opts.Filename = filepath.Base(path)
	}
	return c.Upload(ctx, f, st.Size(), opts)
}

// Upload uploads size bytes from r. The same UploadID (for the same user)
// always yields the same media ID. A broken stream is resumed from the
// front's durable offset; a failed front is replaced by another healthy
// front of the same region, which resumes the session from the region's
// durable offset, and only when the region has none left by a front of
// the other region, starting over (Router.CallSession: the retries knob
// and the retry budget apply).
func (c *Client) Upload(ctx context.Context, r io.ReaderAt, size int64, opts UploadOptions) (*UploadResult, error) {
	if c.Token == nil {
		return nil, errors.New("client: no upload token source")
	}
	if opts.User == "" || opts.Business == "" {
		return nil, errors.New("client: upload needs a user and a business")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return nil, fmt.Errorf("client: hash: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if opts.UploadID == "" {
		opts.UploadID = "sha256-" + sum[:32]
	}
	if opts.Kind == willowv1.Kind_KIND_UNSPECIFIED {
		opts.Kind = KindOf(opts.Filename)
	}
	tok, err := c.Token(opts.User, opts.Business)
	if err != nil {
		return nil, fmt.Errorf("client: token: %w", err)
	}
	ctx = WithToken(WithRequest(ctx, opts.Business, opts.User), tok)
	var res *UploadResult
	var sent int64
	var fronts []string
	err = c.Router.CallSession(ctx, "upload", opts.Business, func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error {
		actx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		fronts = append(fronts, ep.GetNodeId())
		var err error
		res, err = uploadTo(actx, willowv1.NewUploadClient(conn), r, size, sum, tok, opts, &sent)
		if res != nil && res.Region == "" {
			res.Region = ep.GetRegion()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res.SentBytes, res.Fronts = sent, fronts
	if res.State == "failed" {
		return res, fmt.Errorf("%w: %s: %s", ErrMediaFailed, res.Reason, res.Error)
	}
	return res, nil
}

func (c *Client) timeout() time.Duration {
	if c.CallTimeout > 0 {
		return c.CallTimeout
	}
	return DefaultCallTimeout
}

// uploadTo runs Begin, the chunk stream and Commit against one front,
// resuming through Status when the stream breaks (at most a few times).
func uploadTo(ctx context.Context, uc willowv1.UploadClient, r io.ReaderAt, size int64, sum, tok string, opts UploadOptions, sent *int64) (*UploadResult, error) {
	begin, err := uc.Begin(ctx, &willowv1.BeginRequest{
		UploadId: opts.UploadID, Token: tok, Business: opts.Business, User: opts.User,
		Kind: opts.Kind, Size: size, Sha256: sum, Filename: opts.Filename,
	})
	if err != nil {
		return nil, err
	}
	if !begin.GetCommitted() {
		offset := begin.GetOffset()
		for attempt := 0; offset < size; attempt++ {
			off, serr := sendChunks(ctx, uc, r, size, offset, opts.UploadID, sent)
			if serr == nil {
				offset = off
				break
			}
			if attempt >= 3 || ctx.Err() != nil || !resumable(serr) {
				return nil, serr
			}
			st, err := uc.Status(ctx, &willowv1.StatusRequest{UploadId: opts.UploadID, User: opts.User})
			if err != nil {
				return nil, serr
			}
			offset = st.GetOffset()
		}
	}
	cr, err := uc.Commit(ctx, &willowv1.CommitRequest{UploadId: opts.UploadID, User: opts.User})
	if err != nil {
		return nil, err
	}
	return &UploadResult{
		ID: cr.GetMediaId(), Bytes: size, SHA256: sum, Region: cr.GetRegion(),
		Location: cr.GetLocation(), Duplicate: cr.GetDuplicate(), Variants: cr.GetVariants(),
		State: cr.GetState(), Reason: cr.GetReason(), Error: cr.GetError(),
	}, nil
}

func resumable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// sendChunks streams [offset, size) of r, adding what it sends to *sent.
func sendChunks(ctx context.Context, uc willowv1.UploadClient, r io.ReaderAt, size, offset int64, uploadID string, sent *int64) (int64, error) {
	stream, err := uc.Chunks(ctx)
	if err != nil {
		return offset, err
	}
	buf := make([]byte, ChunkSize)
	for off := offset; off < size; {
		n := int64(len(buf))
		if size-off < n {
			n = size - off
		}
		if _, err := r.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return offset, fmt.Errorf("client: read: %w", err)
		}
		if err := stream.Send(&willowv1.Chunk{UploadId: uploadID, Offset: off, Data: buf[:n]}); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = stream.CloseAndRecv()
			}
			return offset, err
		}
		*sent += n
		off += n
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return offset, err
	}
	return resp.GetOffset(), nil
}

// Download writes one variant of a media item to w, from the edge caches
// of the caller's region, then (per the retries knob) the other region's.
// A malformed ID fails before any call.
//
// With URLKeys set the request is signed for the user of ctx
// (WithRequest); without, it carries no signature, which an edge with URL
// keys refuses (PERMISSION_DENIED signature_missing) unless the media's
// business is public.
func (c *Client) Download(ctx context.Context, id, variant string, w io.Writer) (*willowv1.DataChunk, error) {
	if variant == "" {
		variant = media.VariantRaw
	}
	var sig urlsign.Signature
	if c.URLKeys != nil {
		ttl := c.URLTTL
		if ttl <= 0 {
			ttl = DefaultURLTTL
		}
		sig = c.URLKeys.Sign(id, variant, requestUser(ctx), time.Now().Add(ttl))
	}
	return c.download(ctx, id, variant, sig, w)
}

// DownloadURL downloads a signed URL (as the timeline's Poll returns them:
// /m/ID/VARIANT?u=…&exp=…&kid=…&sig=…, with or without scheme and host)
// through the edge caches' gRPC, like Download. The signature is the
// URL's; URLKeys plays no part.
func (c *Client) DownloadURL(ctx context.Context, rawURL string, w io.Writer) (*willowv1.DataChunk, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "download url: %v", err)
	}
	id, variant, ok := urlsign.ParsePath(u.Path)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "download url %q: want /m/ID/VARIANT", u.Path)
	}
	return c.download(ctx, id, variant, urlsign.FromQuery(u.Query()), w)
}

// requestUser is the user WithRequest put in ctx.
func requestUser(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(shedding.MDUser); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c *Client) download(ctx context.Context, id, variant string, sig urlsign.Signature, w io.Writer) (*willowv1.DataChunk, error) {
	if _, err := media.Parse(id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var sigProto *willowv1.UrlSignature
	if !sig.IsZero() {
		sigProto = &willowv1.UrlSignature{KeyId: sig.KeyID, ExpiresUnix: sig.Expires, User: sig.User, Mac: sig.MAC}
	}
	if c.Token != nil && !hasToken(ctx) {
		// Route and edge Get are client calls: present the token of the
		// user the request context names (WithRequest), else of
		// AnonymousUser.
		md, _ := metadata.FromOutgoingContext(ctx)
		user, business := AnonymousUser, ""
		if u := md.Get(shedding.MDUser); len(u) > 0 && u[0] != "" {
			user = u[0]
		}
		if b := md.Get(shedding.MDBusiness); len(b) > 0 {
			business = b[0]
		}
		tok, err := c.Token(user, business)
		if err != nil {
			return nil, fmt.Errorf("client: token: %w", err)
		}
		ctx = WithToken(ctx, tok)
	}
	var head *willowv1.DataChunk
	var written int64
	var lastErr error
	err := c.Router.Call(ctx, "edgecache", "", func(ctx context.Context, conn *grpc.ClientConn, ep *willowv1.Endpoint) error {
		if written > 0 {
			// A retry after bytes were written must start from a clean
			// sink, or it would duplicate them.
			rw, ok := w.(resettable)
			if !ok {
				return lastErr
			}
			if err := rw.Truncate(0); err != nil {
				return err
			}
			if _, err := rw.Seek(0, io.SeekStart); err != nil {
				return err
			}
			written = 0
		}
		actx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		stream, err := willowv1.NewEdgeCacheClient(conn).Get(actx, &willowv1.GetRequest{MediaId: id, Variant: variant, Signature: sigProto})
		if err != nil {
			return err
		}
		// Buffer the first message: nothing is written to w until the
		// stream has started, so a retry elsewhere writes a clean copy.
		first, err := stream.Recv()
		if err != nil {
			return err
		}
		head = first
		for msg := first; ; {
			n, err := w.Write(msg.GetData())
			written += int64(n)
			if err != nil {
				return err
			}
			msg, err = stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				lastErr = err
				return err
			}
		}
	})
	return head, err
}

// resettable is a sink a retried download can start over in (an *os.File).
type resettable interface {
	Truncate(size int64) error
	Seek(offset int64, whence int) (int64, error)
}
