package timeline

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"willow/media"
	willowv1 "willow/proto/willow/v1"
	"willow/rpcstatus"
	"willow/urlsign"
)

// DefaultURLTTL is how long the download URLs Poll returns are valid.
const DefaultURLTTL = time.Hour

// MediaLookup returns what is known of a media item; the timeline checks
// its owner on Publish and its kind picks the variants Poll signs. Errors
// are gRPC statuses (NOT_FOUND for an unknown item).
type MediaLookup interface {
	Media(ctx context.Context, mediaID string) (*willowv1.Media, error)
}

// Router is the part of the SDK router (*client.Router) UploadMedia uses.
type Router interface {
	Route(ctx context.Context, role, business string) (*willowv1.RouteResponse, error)
	Conn(addr string) (*grpc.ClientConn, error)
}

// UploadMedia looks media up on the upload fronts (Upload.GetMedia, with
// the connection's node credentials, so owner fields come back): the front
// named in the media ID first (it alone holds pool 2), then any other.
type UploadMedia struct{ Router Router }

var _ MediaLookup = UploadMedia{}

// Media implements MediaLookup.
func (u UploadMedia) Media(ctx context.Context, mediaID string) (*willowv1.Media, error) {
	id, err := media.Parse(mediaID)
	if err != nil {
		return nil, grpcstatus.Error(codes.NotFound, err.Error())
	}
	rr, err := u.Router.Route(ctx, "upload", "")
	if err != nil {
		return nil, err
	}
	eps := append(rr.GetPrimary(), rr.GetSecondary()...)
	for i, ep := range eps {
		if ep.GetNodeId() == id.Node {
			eps[0], eps[i] = eps[i], eps[0]
			break
		}
	}
	last := grpcstatus.Error(codes.Unavailable, "no upload front listed")
	for _, ep := range eps {
		conn, err := u.Router.Conn(ep.GetAddr())
		if err != nil {
			last = err
			continue
		}
		m, err := willowv1.NewUploadClient(conn).GetMedia(ctx, &willowv1.GetMediaRequest{MediaId: mediaID})
		if err == nil || grpcstatus.Code(err) == codes.NotFound && ep.GetNodeId() == id.Node {
			return m, err
		}
		last = err
	}
	return nil, last
}

// checkMedia checks that author uploaded every media item of a post and
// returns their kinds ("image", "video"; "" when not looked up).
func (s *Server) checkMedia(ctx context.Context, author string, ids []string) ([]string, error) {
	kinds := make([]string, len(ids))
	if s.media == nil {
		return kinds, nil
	}
	for i, id := range ids {
		m, err := s.media.Media(ctx, id)
		switch {
		case grpcstatus.Code(err) == codes.NotFound:
			return nil, rpcstatus.New(codes.InvalidArgument, ReasonUnknownMedia, "media %s does not exist", id)
		case err != nil:
			return nil, rpcstatus.New(codes.Unavailable, ReasonMediaLookup, "media %s: %v", id, err)
		case m.GetUser() != author:
			return nil, rpcstatus.New(codes.PermissionDenied, ReasonNotMediaOwner, "media %s is not %s's", id, author)
		}
		kinds[i] = "image"
		if m.GetKind() == willowv1.Kind_KIND_VIDEO {
			kinds[i] = "video"
		}
	}
	return kinds, nil
}

// variantsOf are the variants Poll signs for a kind: what a feed shows,
// never the raw upload (it keeps the metadata compress strips).
func variantsOf(kind string) []string {
	switch kind {
	case "image":
		return []string{media.VariantThumb, media.VariantMedium, media.VariantLarge}
	case "video":
		return []string{media.VariantVideo, media.VariantPoster}
	}
	return []string{media.VariantThumb, media.VariantMedium, media.VariantLarge, media.VariantVideo, media.VariantPoster}
}

// links signs an item's media for user; nil without URL keys.
func (s *Server) links(user string, ids, kinds []string) []*willowv1.MediaLinks {
	if s.keys == nil {
		return nil
	}
	exp := s.now().Add(s.cfg.URLTTL)
	out := make([]*willowv1.MediaLinks, 0, len(ids))
	for i, id := range ids {
		kind := ""
		if i < len(kinds) {
			kind = kinds[i]
		}
		l := &willowv1.MediaLinks{MediaId: id, ExpiresUnix: exp.Unix(), Urls: map[string]string{}}
		for _, v := range variantsOf(kind) {
			l.Urls[v] = s.keys.URL(id, v, user, exp)
		}
		out = append(out, l)
	}
	return out
}

func newKeys(keys []urlsign.Key) (*urlsign.Keyring, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	k, err := urlsign.New(keys)
	if err != nil {
		return nil, fmt.Errorf("timeline: url keys: %w", err)
	}
	return k, nil
}
