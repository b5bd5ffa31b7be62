package edgecache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"willow/auth"
	"willow/edgecache/s4lru"
	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/store"
	"willow/urlsign"
)

// businessCacheBytes bounds the media -> business cache of unsigned
// requests (about 40 000 entries).
const businessCacheBytes = 4 << 20

// access decides whether a download may be served: a URL signed with one
// of the keys, or media of a public business. A nil keyring means
// downloads are not signed (development without keys).
type access struct {
	keys   *urlsign.Keyring
	public map[string]bool

	mu  sync.Mutex // guards biz
	biz *s4lru.Cache[string]
}

func newAccess(cfg Config) (*access, error) {
	a := &access{public: map[string]bool{}, biz: s4lru.New(s4lru.Config[string]{CapacityBytes: businessCacheBytes})}
	for _, b := range cfg.PublicBusinesses {
		a.public[b] = true
	}
	if len(cfg.URLKeys) > 0 {
		k, err := urlsign.New(cfg.URLKeys)
		if err != nil {
			return nil, fmt.Errorf("edgecache: url keys: %w", err)
		}
		a.keys = k
	}
	return a, nil
}

// forbidden wraps a urlsign error as ErrForbidden.
func forbidden(err error) error { return fmt.Errorf("%w: %w", ErrForbidden, err) }

// forbiddenReason is the reason code of an ErrForbidden.
func forbiddenReason(err error) string {
	switch {
	case errors.Is(err, urlsign.ErrMissing):
		return ReasonSignatureMissing
	case errors.Is(err, urlsign.ErrExpired):
		return ReasonSignatureExpired
	case errors.Is(err, urlsign.ErrUnknownKey):
		return ReasonSignatureUnknownKey
	}
	return ReasonSignatureInvalid
}

// authorize checks that one variant may be served to a caller presenting
// sig (zero when unsigned). signed reports that a signature let it through
// (the response is then private to that caller). Errors: ErrBadRequest for
// a malformed ID or variant, ErrForbidden (wrapping the urlsign error)
// for a missing, expired, tampered or unknown-key signature, ErrNotFound /
// ErrProcessing / ErrOrigin when an unsigned request's media cannot be
// looked up. The signature is checked before anything is read.
func (s *Server) authorize(ctx context.Context, idStr, variant string, sig urlsign.Signature) (signed bool, err error) {
	a := s.acc
	if a.keys == nil {
		return false, nil
	}
	id, err := parseReq(idStr, variant)
	if err != nil {
		return false, err
	}
	if !sig.IsZero() {
		if err := a.keys.Verify(idStr, variant, sig, s.now()); err != nil {
			return false, forbidden(err)
		}
		return true, nil
	}
	if len(a.public) == 0 {
		return false, forbidden(urlsign.ErrMissing)
	}
	b, err := s.businessOf(ctx, id)
	if err != nil {
		return false, err
	}
	if !a.public[b] {
		return false, forbidden(fmt.Errorf("%w: business %q downloads are signed", urlsign.ErrMissing, b))
	}
	return false, nil
}

// businessOf returns the business a media item was uploaded for, from its
// store record, or for an item still in pool 2 from its upload front.
func (s *Server) businessOf(ctx context.Context, id media.ID) (string, error) {
	a := s.acc
	a.mu.Lock()
	b, ok := a.biz.Get(id.Key)
	a.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := s.readBusiness(ctx, id)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	a.biz.Add(id.Key, b, int64(len(id.Key)+len(b)+64))
	a.mu.Unlock()
	return b, nil
}

func (s *Server) readBusiness(ctx context.Context, id media.ID) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OriginTimeout)
	defer cancel()
	rc, _, err := s.store.Get(ctx, media.RecordKey(id.Key))
	switch {
	case err == nil:
		defer rc.Close()
		var rec struct {
			Business string `json:"business"`
		}
		if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&rec); err != nil {
			return "", fmt.Errorf("%w: record of %s: %w", ErrOrigin, id, err)
		}
		return rec.Business, nil
	case !errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("%w: record of %s: %w", ErrOrigin, id, err)
	}
	switch id.Loc {
	case media.LocPool1:
		return "", fmt.Errorf("%w: %s", ErrProcessing, id)
	case media.LocPool2:
		b, err := s.poolBusiness(ctx, id)
		switch {
		case err == nil:
			return b, nil
		case !errors.Is(err, errPoolGone):
			// Not drained yet, and the front holding it is down.
			return "", fmt.Errorf("%w: %s is in pool 2 of %s, which cannot be asked (%w), and not in the store yet", ErrOrigin, id, id.Node, err)
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, id)
}

// poolBusiness asks the upload front named in a pool-2 media ID. It
// returns errPoolGone when there is no router or the front answers
// NOT_FOUND, errPoolDown when the front is not listed, and the front's
// error when it fails.
func (s *Server) poolBusiness(ctx context.Context, id media.ID) (string, error) {
	if s.router == nil {
		return "", fmt.Errorf("%w: no router", errPoolGone)
	}
	conn, err := s.poolFront(ctx, id)
	if err != nil {
		return "", err
	}
	m, err := willowv1.NewUploadClient(conn).GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: id.String()})
	if status.Code(err) == codes.NotFound {
		return "", fmt.Errorf("%w: %s", errPoolGone, rpcstatus.Reason(err))
	}
	if err != nil {
		s.log.Warn("business lookup on the upload front failed", "id", id, "err", err)
		return "", err
	}
	return m.GetBusiness(), nil
}

// signatureOf converts EdgeCache.Get's signature.
func signatureOf(p *willowv1.UrlSignature) urlsign.Signature {
	if p == nil {
		return urlsign.Signature{}
	}
	return urlsign.Signature{KeyID: p.GetKeyId(), Expires: p.GetExpiresUnix(), User: p.GetUser(), MAC: p.GetMac()}
}

// SignatureProto converts a signature for EdgeCache.Get.
func SignatureProto(s urlsign.Signature) *willowv1.UrlSignature {
	if s.IsZero() {
		return nil
	}
	return &willowv1.UrlSignature{KeyId: s.KeyID, ExpiresUnix: s.Expires, User: s.User, Mac: s.MAC}
}

// fromPeer reports whether a Get{peer: true} may skip the signature check
// and forwarding: only an authenticated node may (package auth; a client's
// peer flag is ignored, so its request is checked and routed like any
// other). Without an authenticated caller (a node without auth configured)
// the flag is trusted only when downloads are not signed anyway; with URL
// keys such a peer's fill is refused and the asking node reads origin.
func (s *Server) fromPeer(ctx context.Context) bool {
	if c, ok := auth.FromContext(ctx); ok {
		return c.Class == auth.Node
	}
	return s.acc.keys == nil
}
